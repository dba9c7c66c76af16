-- InstallProduct's request_id (AIP-155): the same request id returns the first answer.
CREATE TABLE kb.product_install_requests (
    project_id    text NOT NULL CHECK (project_id <> ''),
    request_id    text NOT NULL CHECK (request_id <> '' AND length(request_id) <= 128),
    product_name  text NOT NULL,
    response      jsonb NOT NULL CHECK (jsonb_typeof(response) = 'object'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, request_id)
);
