-- Fair shares of a model's shared budget between projects across every process
-- (agentfleet.llm.limiter.quota_shares): the virtual time of each contending project
-- ({"project": [virtual_time, last_asked_epoch_s]}, at most 256 entries, pruned at every
-- grant) and of the last call granted.
ALTER TABLE kb.model_quota_budgets
    ADD COLUMN shares jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(shares) = 'object'),
    ADD COLUMN vclock double precision NOT NULL DEFAULT 0;

-- A grant reads the row and writes it back only if its version is unchanged (a
-- compare-and-set: two autocommitted round trips instead of a four-round-trip transaction).
ALTER TABLE kb.model_quota_budgets ADD COLUMN version bigint NOT NULL DEFAULT 0;
