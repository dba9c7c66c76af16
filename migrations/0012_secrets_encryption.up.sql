-- Project secrets encrypted at rest (envelope encryption, agentfleet.secrets.secrets_crypto).
-- A row holds either the sealed value (ciphertext, nonce, wrapped data key, key id) or,
-- for a row written before this migration, the plain value: SQL cannot encrypt without
-- the operator's key, so such rows stay readable until `agentfleet secrets rotate-key`
-- encrypts them (it reports how many it did). Every new or replaced secret is sealed.

ALTER TABLE kb.project_secrets
    ALTER COLUMN value DROP NOT NULL,
    ADD COLUMN ciphertext  bytea,
    ADD COLUMN nonce       bytea,
    ADD COLUMN wrapped_key bytea,
    ADD COLUMN key_id      text,
    ADD CONSTRAINT project_secrets_sealed_or_plain CHECK (
        (value IS NULL AND ciphertext IS NOT NULL AND nonce IS NOT NULL
             AND wrapped_key IS NOT NULL AND key_id IS NOT NULL)
        OR (value IS NOT NULL AND ciphertext IS NULL AND nonce IS NULL
             AND wrapped_key IS NULL AND key_id IS NULL)
    );

COMMENT ON COLUMN kb.project_secrets.value IS
    'plain value of a row written before encryption; NULL once sealed';
