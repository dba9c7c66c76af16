-- The fair run claim (issue #15) walks the queue project by project: it finds the projects
-- with queued runs (a loose scan on project_id) and takes each one's oldest top-level runs
-- (depth = 0, in created_at order) and its oldest children. The queued-run cap of
-- TriggerRun/StartRun counts a project's top-level range. It replaces the global
-- (created_at, id) queue index, which nothing reads any more.
CREATE INDEX agent_runs_queued_project_idx
    ON kb.agent_runs (project_id, depth, created_at, id) WHERE status = 'queued';
DROP INDEX kb.agent_runs_queued_idx;
