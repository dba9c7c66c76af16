"""Commands that manage a project's setup rather than its runs: tokens and projects
(`admin`), agents and products (`agents`), budgets, secrets, tools and MCP servers, remote
A2A agents, triggers and schedules, history retention. Each adds its subcommands to the
command table of :mod:`agentfleet.cli.commands` and talks to the services through
:mod:`agentfleet.cli.client`.
"""
