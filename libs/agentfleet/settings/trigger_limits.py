"""The operator's limits on runs that triggers and schedules start (issue 32): read by
:mod:`agentfleet.config`, enforced by the executor's trigger consumer and TriggerService."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TriggerLimits"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TriggerLimits:
    """Per-project bounds of what events may start; the defaults are the settings'."""

    max_chain_depth: int = 3
    """AGENTFLEET_TRIGGER_MAX_CHAIN_DEPTH: a run whose trigger came from the writes of a run
    this deep in a chain is not started (a skipped firing, reason chain_depth_cap)."""
    max_queued_per_project: int = 100
    """AGENTFLEET_TRIGGER_MAX_QUEUED_PER_PROJECT: triggered runs one project may have queued;
    past it a firing is skipped (queued_cap)."""
    max_per_minute: int = 60
    """AGENTFLEET_TRIGGER_MAX_PER_MINUTE: runs triggers may start per project in any 60 s;
    past it a firing is skipped (rate_cap)."""
    max_agents_per_event: int = 20
    """AGENTFLEET_TRIGGER_MAX_AGENTS_PER_EVENT: agents one event may start (by name order)."""
    schedule_min_interval_s: int = 60
    """AGENTFLEET_SCHEDULE_MIN_INTERVAL_S: a cron expression whose ticks come closer than
    this is refused (INVALID_ARGUMENT naming schedule.cron)."""
    max_schedules_per_project: int = 50
    """AGENTFLEET_MAX_SCHEDULES_PER_PROJECT: schedules one project may hold."""
    max_event_payload_bytes: int = 64 * 1024
    """AGENTFLEET_EVENT_MAX_PAYLOAD_BYTES: the JSON size of an EmitEvent payload."""
