-- Runs queued for a task (task_id set) count toward the per-project caps like top-level runs,
-- even when task_lineage placed them under the run that created the task: a member can queue
-- them with TriggerRun as often as it likes. Only a parent's own children (spawn_agents, flow
-- members: depth > 0, no task) stay exempt, since their parent holds a slot waiting for them.
-- The queue index is keyed on that rule instead of depth, so the insert's queued count and
-- the claim's two offers (capped, exempt) each read one contiguous range of it. The claim
-- SQL repeats the key expression word for word (services/executor/store/caps.py), or the
-- index is not used.
DROP INDEX kb.agent_runs_queued_project_idx;
CREATE INDEX agent_runs_queued_project_idx
    ON kb.agent_runs (project_id, (depth = 0 OR task_id IS NOT NULL), created_at, id)
    WHERE status = 'queued';
