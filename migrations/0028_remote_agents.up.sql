-- Remote A2A agents a project registers (issue 33, "consume"): spawn_agents runs one as a
-- child whose work is a task on the remote agent. ${NAME} in headers is filled from
-- kb.project_secrets at connect time; the stored values keep the placeholders.
CREATE TABLE kb.remote_agents (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id   text NOT NULL CHECK (project_id <> ''),
    name         text NOT NULL CHECK (name <> ''),
    -- The Agent Card's URL (the card names the endpoint the task is sent to).
    card_url     text NOT NULL CHECK (card_url <> ''),
    headers      jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(headers) = 'object'),
    -- Shown by list_available_agents; the card's own description when the caller gave none.
    description  text NOT NULL DEFAULT '',
    -- A child's wall-clock limit when spawn_agents gives none.
    timeout_s    double precision NOT NULL DEFAULT 300 CHECK (timeout_s > 0 AND timeout_s <= 86400),
    product_id   uuid REFERENCES kb.products (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT remote_agents_project_name_key UNIQUE (project_id, name)
);

CREATE INDEX remote_agents_product_idx
    ON kb.remote_agents (product_id) WHERE product_id IS NOT NULL;

-- A run whose work is a remote A2A task: {name, card_url, url, task_id, context_id} as it
-- becomes known. NULL for every local run.
ALTER TABLE kb.agent_runs ADD COLUMN remote_agent jsonb
    CHECK (remote_agent IS NULL OR jsonb_typeof(remote_agent) = 'object');
