-- The a2a service (issue 33) has its own identity like every service: its token may be
-- named 'a2a'. It calls the executor and history with its callers' tokens, so its own token
-- serves only its start-up and health.
ALTER TABLE kb.api_tokens DROP CONSTRAINT api_tokens_service_named;
ALTER TABLE kb.api_tokens
    ADD CONSTRAINT api_tokens_service_named CHECK (
        (role = 'service') = (service IS NOT NULL)
        AND (
            service IS NULL
            OR service IN ('executor', 'dispatcher', 'toolpool', 'history', 'a2a', 'legacy')
        )
    );
