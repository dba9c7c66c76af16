-- Bearer tokens. Only a hash is stored: the token is shown once, when it is created.

CREATE TABLE kb.api_tokens (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    -- sha256 of the token, lowercase hex.
    token_hash  text NOT NULL CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    -- NULL only for service tokens, which act for any project.
    project_id  text CHECK (project_id <> ''),
    role        text NOT NULL CHECK (role IN ('admin', 'member', 'service')),
    name        text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash),
    CONSTRAINT api_tokens_project_required CHECK (project_id IS NOT NULL OR role = 'service')
);
