-- Runs and everything a run records while it happens (DESIGN §4, §5).

CREATE TABLE kb.agent_runs (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id           text NOT NULL CHECK (project_id <> ''),
    -- Runs outlive their definition: history keeps agent_name.
    agent_definition_id  uuid REFERENCES kb.agent_definitions (id) ON DELETE SET NULL,
    agent_name           text NOT NULL CHECK (agent_name <> ''),
    status               text NOT NULL DEFAULT 'queued'
                         CHECK (status IN ('queued', 'running', 'completed', 'failed',
                                           'cancelled', 'paused')),
    input                text NOT NULL DEFAULT '',
    labels               jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(labels) = 'object'),
    summary              text,
    error_message        text,
    -- A run tree goes (and is retained) as a whole.
    parent_run_id        uuid REFERENCES kb.agent_runs (id) ON DELETE CASCADE,
    -- Filled with the run's own id for top-level runs (trigger below), so "WHERE
    -- root_run_id = $1" selects a whole tree, root included.
    root_run_id          uuid NOT NULL REFERENCES kb.agent_runs (id) ON DELETE CASCADE,
    depth                integer NOT NULL DEFAULT 0 CHECK (depth >= 0),
    step_count           integer NOT NULL DEFAULT 0 CHECK (step_count >= 0),
    -- Across resumes; capped at 500 by the executor (MAX_TOTAL_STEPS).
    total_steps          integer NOT NULL DEFAULT 0 CHECK (total_steps >= 0),
    resume_count         integer NOT NULL DEFAULT 0 CHECK (resume_count >= 0),
    max_steps            integer CHECK (max_steps > 0),
    -- Token budget of a spawned child (spawn_agents max_tokens_per_subtask); null = none.
    max_tokens           bigint CHECK (max_tokens > 0),
    timeout              interval CHECK (timeout > interval '0'),
    tokens_in            bigint NOT NULL DEFAULT 0 CHECK (tokens_in >= 0),
    tokens_out           bigint NOT NULL DEFAULT 0 CHECK (tokens_out >= 0),
    tokens_total_tree    bigint NOT NULL DEFAULT 0 CHECK (tokens_total_tree >= 0),
    trace_id             text,
    -- The SpecTask this run works on, when the dispatcher started it.
    task_id              uuid REFERENCES kb.graph_objects (id) ON DELETE SET NULL,
    -- Idempotency key of StartRun/TriggerRun (AIP-155), unique per project.
    request_id           text CHECK (request_id <> ''),
    lease_owner          text,
    lease_expires_at     timestamptz,
    cancel_requested_at  timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    started_at           timestamptz,
    completed_at         timestamptz,
    duration_ms          bigint CHECK (duration_ms >= 0),
    CONSTRAINT agent_runs_root_consistent
        CHECK ((parent_run_id IS NULL) = (root_run_id = id)),
    CONSTRAINT agent_runs_depth_consistent
        CHECK ((parent_run_id IS NULL) = (depth = 0)),
    CONSTRAINT agent_runs_lease_consistent
        CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    -- "completed_at always set" on a terminal status (DESIGN §4).
    CONSTRAINT agent_runs_terminal_completed
        CHECK (status NOT IN ('completed', 'failed', 'cancelled') OR completed_at IS NOT NULL)
);

CREATE FUNCTION kb.agent_runs_default_root() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Column defaults are applied before BEFORE triggers, so NEW.id is already set.
    NEW.root_run_id := coalesce(NEW.root_run_id, NEW.id);
    RETURN NEW;
END
$$;

CREATE TRIGGER agent_runs_default_root
    BEFORE INSERT ON kb.agent_runs
    FOR EACH ROW EXECUTE FUNCTION kb.agent_runs_default_root();

-- ListRuns pages: ORDER BY created_at DESC, id DESC with a (created_at, id) < (...) keyset,
-- without a filter and with each filter of HistoryService.ListRuns.
CREATE INDEX agent_runs_project_created_idx
    ON kb.agent_runs (project_id, created_at DESC, id DESC);
CREATE INDEX agent_runs_project_agent_created_idx
    ON kb.agent_runs (project_id, agent_name, created_at DESC, id DESC);
CREATE INDEX agent_runs_project_status_created_idx
    ON kb.agent_runs (project_id, status, created_at DESC, id DESC);
-- Children of a run and whole trees; they lead with the run id, which is unique across
-- projects, so they also serve the ON DELETE CASCADE of the two self-references.
CREATE INDEX agent_runs_parent_created_idx
    ON kb.agent_runs (parent_run_id, created_at DESC, id DESC) WHERE parent_run_id IS NOT NULL;
CREATE INDEX agent_runs_root_created_idx
    ON kb.agent_runs (root_run_id, created_at DESC, id DESC);
-- The queue: claim the oldest queued runs FOR UPDATE SKIP LOCKED. Partial, so it holds
-- only the (few) queued runs however long the history grows.
CREATE INDEX agent_runs_queued_idx
    ON kb.agent_runs (created_at, id) WHERE status = 'queued';
-- Crash recovery: running runs whose lease expired.
CREATE INDEX agent_runs_running_lease_idx
    ON kb.agent_runs (lease_expires_at) WHERE status = 'running';
CREATE UNIQUE INDEX agent_runs_request_id_uidx
    ON kb.agent_runs (project_id, request_id) WHERE request_id IS NOT NULL;
-- Runs of a SpecTask (dispatcher), and the ON DELETE SET NULL of both foreign keys.
CREATE INDEX agent_runs_task_idx
    ON kb.agent_runs (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX agent_runs_definition_idx
    ON kb.agent_runs (agent_definition_id) WHERE agent_definition_id IS NOT NULL;

CREATE TABLE kb.agent_run_messages (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    run_id       uuid NOT NULL REFERENCES kb.agent_runs (id) ON DELETE CASCADE,
    -- Position in the conversation, gapless per run; the conversation is rebuilt in seq order.
    seq          integer NOT NULL CHECK (seq >= 0),
    step_number  integer NOT NULL DEFAULT 0 CHECK (step_number >= 0),
    role         text NOT NULL CHECK (role IN ('system', 'user', 'model', 'tool')),
    agent_name   text NOT NULL,
    -- The exact Gemini Content as JSON, so the conversation rebuilds byte-for-byte.
    content      jsonb NOT NULL,
    tokens       integer NOT NULL DEFAULT 0 CHECK (tokens >= 0),
    is_internal  boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT agent_run_messages_run_seq_key UNIQUE (run_id, seq)
);

CREATE TABLE kb.agent_run_tool_calls (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    run_id        uuid NOT NULL REFERENCES kb.agent_runs (id) ON DELETE CASCADE,
    -- The model message that asked for the call.
    message_id    uuid REFERENCES kb.agent_run_messages (id) ON DELETE SET NULL,
    -- The function call id of the model reply (or one the executor assigned).
    tool_call_id  text NOT NULL CHECK (tool_call_id <> ''),
    step_number   integer NOT NULL DEFAULT 0 CHECK (step_number >= 0),
    tool_name     text NOT NULL CHECK (tool_name <> ''),
    source        text NOT NULL CHECK (source IN ('builtin', 'executor') OR source ~ '^mcp:.+'),
    input         jsonb NOT NULL DEFAULT '{}'::jsonb,
    output        jsonb,
    status        text NOT NULL DEFAULT 'started'
                  CHECK (status IN ('started', 'completed', 'failed', 'refused', 'interrupted')),
    error         text,
    -- Runs spawned by this call (spawn_agents), written at spawn time so a recovered parent
    -- re-attaches to them instead of spawning again.
    child_run_ids uuid[] NOT NULL DEFAULT '{}',
    duration_ms   bigint CHECK (duration_ms >= 0),
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz
);

-- ListRunToolCalls pages, and recovery's "started calls of this run".
CREATE INDEX agent_run_tool_calls_run_created_idx
    ON kb.agent_run_tool_calls (run_id, created_at, id);
-- GetRunToolCall looks a call up by its id within the run; a model id is never reused.
CREATE UNIQUE INDEX agent_run_tool_calls_run_call_uidx
    ON kb.agent_run_tool_calls (run_id, tool_call_id);
-- Without it, each message deleted by a run cascade would scan every tool call.
CREATE INDEX agent_run_tool_calls_message_idx
    ON kb.agent_run_tool_calls (message_id) WHERE message_id IS NOT NULL;

CREATE TABLE kb.agent_run_events (
    run_id       uuid NOT NULL REFERENCES kb.agent_runs (id) ON DELETE CASCADE,
    -- Gapless per run: WatchRun(after_seq) resumes from it with no gap and no duplicate.
    seq          integer NOT NULL CHECK (seq >= 1),
    root_run_id  uuid NOT NULL,
    type         text NOT NULL CHECK (type <> ''),
    agent_name   text NOT NULL,
    is_internal  boolean NOT NULL DEFAULT false,
    payload      jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);

-- Events of a whole run tree in order (watching a tree, the live view of the CLI).
CREATE INDEX agent_run_events_root_idx
    ON kb.agent_run_events (root_run_id, created_at, run_id, seq);
