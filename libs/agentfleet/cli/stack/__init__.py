"""The local stack behind ``agentfleet up`` and ``make run``: PostgreSQL, migrations and the
services as supervised child processes (`up`, `supervise`), and the research demo played on
it (`demo`). Uses the CLI's client and rendering and the library; never a service module.
"""
