UPDATE kb.api_tokens SET service = 'legacy', revoked_at = coalesce(revoked_at, now())
WHERE service = 'a2a';
ALTER TABLE kb.api_tokens DROP CONSTRAINT api_tokens_service_named;
ALTER TABLE kb.api_tokens
    ADD CONSTRAINT api_tokens_service_named CHECK (
        (role = 'service') = (service IS NOT NULL)
        AND (service IS NULL OR service IN ('executor', 'dispatcher', 'toolpool', 'history', 'legacy'))
    );
