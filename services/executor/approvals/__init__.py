"""Human approval of tool calls: the policy (`approvals`, pure), DecideToolCall's fields
(`approval_requests`), decisions and the deadline sweep (`approval_store`), and holding a
step and continuing it (`approval_resume`). Domain: may use the executor's values and store;
never a servicer.
"""
