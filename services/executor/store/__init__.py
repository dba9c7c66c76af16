"""The executor's tables (issue #17: one repository per table, one owner service), one module
each: :mod:`.runs` (``kb.agent_runs``, its claim in :mod:`.claim_sql`), :mod:`.tool_calls`,
:mod:`.messages`, :mod:`.resume_requests`; and :mod:`.event_reads`, the executor's reads of
``kb.agent_run_events`` (appends and replay: :mod:`agentfleet.events`).

The step writes: events/run_events.sql (``libs/agentfleet/events``), one statement per step
spanning four tables by design, so a step is one round trip.

Functions take the caller's pool or connection (the caller keeps its transaction) and return
typed rows.
"""
