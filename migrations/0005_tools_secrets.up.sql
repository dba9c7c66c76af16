-- External MCP servers of a project and the secrets their settings may reference.

CREATE TABLE kb.mcp_servers (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id         text NOT NULL CHECK (project_id <> ''),
    name               text NOT NULL CHECK (name <> ''),
    transport          text NOT NULL CHECK (transport IN ('stdio', 'sse', 'streamable_http')),
    -- stdio: the process to start. ${NAME} in args, env, url and headers is filled from
    -- kb.project_secrets at connect time; the stored values keep the placeholders.
    command            text,
    args               text[] NOT NULL DEFAULT '{}',
    env                jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(env) = 'object'),
    -- sse / streamable_http: the endpoint.
    url                text,
    headers            jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(headers) = 'object'),
    -- NULL: tools are exposed as <name>__<tool>; '' exposes raw tool names.
    tool_prefix        text,
    enabled            boolean NOT NULL DEFAULT true,
    connect_timeout_s  double precision NOT NULL DEFAULT 10 CHECK (connect_timeout_s > 0),
    call_timeout_s     double precision NOT NULL DEFAULT 60 CHECK (call_timeout_s > 0),
    -- Servers installed by a product go with it.
    product_id         uuid REFERENCES kb.products (id) ON DELETE CASCADE,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT mcp_servers_project_name_key UNIQUE (project_id, name),
    CONSTRAINT mcp_servers_endpoint_required CHECK (
        CASE WHEN transport = 'stdio' THEN command IS NOT NULL AND command <> ''
             ELSE url IS NOT NULL AND url <> '' END
    )
);

CREATE INDEX mcp_servers_product_idx
    ON kb.mcp_servers (product_id) WHERE product_id IS NOT NULL;

CREATE TABLE kb.project_secrets (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    project_id  text NOT NULL CHECK (project_id <> ''),
    name        text NOT NULL CHECK (name <> ''),
    -- Never returned by any API; only interpolated into MCP server settings.
    value       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT project_secrets_project_name_key UNIQUE (project_id, name)
);
