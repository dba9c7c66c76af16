"""Which runs count toward a project's caps on queued and running runs (issue #15).

A run counts when a caller queued it -- StartRun/TriggerRun: a top-level run, or a run of a
task even when :mod:`services.executor.task_lineage` placed it under the task's creator.
Only the runs a parent starts itself (spawn_agents children, flow members) are exempt: the
parent holds a running slot while it waits for them, so capping them could deadlock it. A
task's creator never waits for its tasks' runs (create_subtasks returns once the tasks are
written; the dispatcher runs them), so capping those cannot.
"""

from __future__ import annotations

from services.executor.runs import StartRunParams

__all__ = ["capped", "is_capped"]


def capped(alias: str) -> str:
    """SQL true for a run of ``alias`` that counts toward the caps.

    Word for word the key of agent_runs_queued_project_idx (migration 0019) with the alias:
    the planner matches index expressions by their form, so any other spelling of the same
    rule reads the queue without that index.
    """
    return f"({alias}.depth = 0 OR {alias}.task_id IS NOT NULL)"


def is_capped(params: StartRunParams) -> bool:
    """:func:`capped` of the run ``params`` would queue."""
    return params.parent_run_id is None or params.task_id is not None
