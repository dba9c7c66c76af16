-- What model calls cost (issue #31): the cost of each model message and the model that
-- answered it (a fallback model may answer instead of the definition's), a run's cost and its
-- tree's, beside tokens_in/out and tokens_total_tree; per-project budgets and the usage they
-- are checked against. Costs are whole nano-dollars (USD x 10^9, agentfleet.settings.model_prices), so
-- sums stay exact. New columns have constant defaults: no table rewrite.
ALTER TABLE kb.agent_runs
    ADD COLUMN cost_nanos bigint NOT NULL DEFAULT 0 CHECK (cost_nanos >= 0),
    ADD COLUMN cost_total_tree_nanos bigint NOT NULL DEFAULT 0
        CHECK (cost_total_tree_nanos >= 0),
    -- The cost limit of a whole tree (StartRunRequest.max_tree_cost_nanos), on its root.
    ADD COLUMN max_tree_cost_nanos bigint CHECK (max_tree_cost_nanos > 0);
ALTER TABLE kb.agent_run_messages
    ADD COLUMN model_name text CHECK (model_name <> ''),
    ADD COLUMN cost_nanos bigint NOT NULL DEFAULT 0 CHECK (cost_nanos >= 0);

-- A project's budgets (SetProjectBudget, admin only). A null limit is no limit. A run that
-- would pass a hard limit pauses; warn_fraction of a limit emits one warning per period.
CREATE TABLE kb.project_budgets (
    project_id          text PRIMARY KEY CHECK (project_id <> ''),
    daily_tokens        bigint CHECK (daily_tokens > 0),
    monthly_tokens      bigint CHECK (monthly_tokens > 0),
    daily_cost_nanos    bigint CHECK (daily_cost_nanos > 0),
    monthly_cost_nanos  bigint CHECK (monthly_cost_nanos > 0),
    warn_fraction       double precision NOT NULL DEFAULT 0.8
                        CHECK (warn_fraction > 0 AND warn_fraction <= 1),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

-- Tokens and cost of a project per UTC day and month, added to in the statement that
-- records each model reply (one row update per period, no scan of the runs).
CREATE TABLE kb.project_usage (
    project_id    text NOT NULL CHECK (project_id <> ''),
    period        text NOT NULL CHECK (period IN ('day', 'month')),
    period_start  date NOT NULL,
    tokens        bigint NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    cost_nanos    bigint NOT NULL DEFAULT 0 CHECK (cost_nanos >= 0),
    -- The period's warning was emitted (once per period).
    warned        boolean NOT NULL DEFAULT false,
    PRIMARY KEY (project_id, period, period_start)
);
