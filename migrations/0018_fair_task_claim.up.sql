-- The dispatcher's claim goes project by project (fairness): it finds the projects with
-- available tasks by a loose scan and takes each one's highest-priority tasks, so it needs
-- the available tasks per project in the claim's order. graph_objects_ready_spectasks_idx
-- stays for classify_new, whose malformed-priority check is a range on its leading column,
-- and for the dispatcher load query (queue_depth.py).
CREATE INDEX graph_objects_ready_spectasks_project_idx
    ON kb.graph_objects (project_id, (properties -> 'priority') DESC NULLS LAST, created_at, id)
    WHERE type = 'SpecTask' AND status = 'pending' AND (properties ->> 'ready') = 'true';
