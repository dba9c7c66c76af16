-- Service tokens keep working after a rollback, without their service's limits. Tokens the
-- up migration revoked stay revoked.
ALTER TABLE kb.api_tokens DROP CONSTRAINT api_tokens_service_named;
ALTER TABLE kb.api_tokens DROP COLUMN service;
