"""The executor's port to the tools: the toolpool client and tool-call plumbing
(`tool_gateway`) and the in-process built-in tools (`builtin_tools`, which runs the
toolpool's own CallTool code inside the executor: the one declared cross-service import).
May use the executor's values and store; never a servicer.
"""
