-- The dispatcher's scans over SpecTask graph objects (DESIGN §9). No new table: tasks,
-- graphs and sessions stay graph objects; these partial indexes keep each scan to the few
-- rows it is about, however many tasks a project has.

-- Claim: available tasks (pending, marked ready), highest priority first, then oldest.
-- The ORDER BY of the claim query repeats these expressions exactly.
CREATE INDEX graph_objects_ready_spectasks_idx
    ON kb.graph_objects ((properties -> 'priority') DESC NULLS LAST, created_at, id)
    WHERE type = 'SpecTask' AND status = 'pending' AND (properties ->> 'ready') = 'true';

-- In-flight tasks: per-graph parallelism counts and expired leases (adoption).
CREATE INDEX graph_objects_inprogress_spectasks_idx
    ON kb.graph_objects ((properties ->> 'graph_id'))
    WHERE type = 'SpecTask' AND status = 'in_progress';

-- The tasks of one graph (GetTaskGraph, counts, cancel).
CREATE INDEX graph_objects_spectask_graph_idx
    ON kb.graph_objects (project_id, (properties ->> 'graph_id'))
    WHERE type = 'SpecTask';
