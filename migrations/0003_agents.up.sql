-- Installed products and the agent definitions they (or users) put in a project.

CREATE TABLE kb.products (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id    text NOT NULL CHECK (project_id <> ''),
    name          text NOT NULL CHECK (name <> ''),
    version       text NOT NULL,
    manifest      jsonb NOT NULL CHECK (jsonb_typeof(manifest) = 'object'),
    installed_at  timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT products_project_name_key UNIQUE (project_id, name)
);

CREATE TABLE kb.agent_definitions (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id         text NOT NULL CHECK (project_id <> ''),
    name               text NOT NULL CHECK (name <> ''),
    description        text NOT NULL DEFAULT '',
    system_prompt      text NOT NULL DEFAULT '',
    -- {provider, name, temperature, max_output_tokens}
    model              jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(model) = 'object'),
    -- Tool names and fnmatch globs, resolved by the toolpool.
    tools              text[] NOT NULL DEFAULT '{}',
    flow_type          text NOT NULL DEFAULT 'single'
                       CHECK (flow_type IN ('single', 'sequential', 'loop', 'parallel')),
    sub_agents         text[] NOT NULL DEFAULT '{}',
    max_iterations     integer CHECK (max_iterations > 0),
    -- NULL: unlimited at top level, 50 for sub-agents (DESIGN §6).
    max_steps          integer CHECK (max_steps > 0),
    default_timeout_s  double precision CHECK (default_timeout_s > 0),
    visibility         text NOT NULL DEFAULT 'project'
                       CHECK (visibility IN ('external', 'project', 'internal')),
    is_default         boolean NOT NULL DEFAULT false,
    tags               text[] NOT NULL DEFAULT '{}',
    -- e.g. 'on_document_ingested'; NULL = triggered by requests only.
    trigger            text,
    config             jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(config) = 'object'),
    -- Definitions installed by a product go with it; hand-made ones have no product.
    product_id         uuid REFERENCES kb.products (id) ON DELETE CASCADE,
    -- Revision, bumped on every upsert.
    version            integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT agent_definitions_project_name_key UNIQUE (project_id, name)
);

CREATE INDEX agent_definitions_product_idx
    ON kb.agent_definitions (product_id) WHERE product_id IS NOT NULL;
