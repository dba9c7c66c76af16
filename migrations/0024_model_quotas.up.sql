-- The shared budget of each model and credential (agentfleet.llm.limiter.quota_math): every
-- executor and dispatcher process takes its grants (stretches of the budget's timeline)
-- from this row, one short transaction per grant, never per call. Times are epoch seconds
-- on this database's clock, so the processes' clocks never matter. The credential is a
-- digest of the API key, Vertex project or base URL, never the key itself.
CREATE TABLE kb.model_quota_budgets (
    model text NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    credential text NOT NULL CHECK (credential ~ '^[0-9a-f]{16}$'),
    tat double precision NOT NULL DEFAULT 0,
    blocked_until double precision NOT NULL DEFAULT 0,
    day text NOT NULL DEFAULT '',
    day_requests bigint NOT NULL DEFAULT 0,
    discovered_rps double precision CHECK (discovered_rps > 0),
    last_decrease double precision NOT NULL DEFAULT 0,
    last_throttled double precision NOT NULL DEFAULT 0,
    recent_since double precision NOT NULL DEFAULT 0,
    recent_calls bigint NOT NULL DEFAULT 0,
    throttled_total bigint NOT NULL DEFAULT 0,
    granted_total bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, credential)
);
