"""Runs that start runs: `coordination` (list_available_agents, spawn_agents, exit_loop),
`children` (child batches and the wait for them), `tree` (cancelling a tree, tree tokens),
`flows` (sequential, loop and parallel flows). Domain: may use the executor's values and
store; never a servicer.
"""
