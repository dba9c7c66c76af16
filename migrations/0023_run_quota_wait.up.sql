-- A running run's wait for its model's quota (issue 31): what its model call waits for
-- ({"model", "limit", "expected_wait_s"}) and since when, NULL when it is not waiting. Set
-- and cleared by the worker that holds the run's lease, with the MODEL_QUOTA_WAIT event in
-- the same statement; cleared when the run ends or another worker takes it over, so a stale
-- wait never outlives the call that waited. Nullable columns without a default: no table
-- rewrite.
ALTER TABLE kb.agent_runs
    ADD COLUMN quota_wait jsonb CHECK (quota_wait IS NULL OR jsonb_typeof(quota_wait) = 'object'),
    ADD COLUMN quota_wait_since timestamptz,
    ADD CONSTRAINT agent_runs_quota_wait_since_check
        CHECK ((quota_wait IS NULL) = (quota_wait_since IS NULL));
