-- The dispatcher's claim reads at most a bounded number of rows of each project's walk
-- (graph_objects_ready_spectasks_project_idx); a project whose walk ends on tasks of graphs
-- at their max_parallel continues graph by graph: a loose scan of the project's graphs with
-- ready tasks that steps over a full graph in one probe, then each kept graph's best tasks.
-- Both read this index (services/dispatcher/store/claim_sql.py repeats its expressions word
-- for word, or it is not used).
CREATE INDEX graph_objects_ready_spectasks_graph_idx
    ON kb.graph_objects (project_id, (properties ->> 'graph_id'),
                         (properties -> 'priority') DESC NULLS LAST, created_at, id)
    WHERE type = 'SpecTask' AND status = 'pending' AND (properties ->> 'ready') = 'true';
