-- Sealed values cannot be decrypted in SQL, and dropping them silently would break every
-- MCP server that uses them: refuse, naming what to do, while any sealed row exists.
DO $$
DECLARE
    sealed bigint;
BEGIN
    SELECT count(*) INTO sealed FROM kb.project_secrets WHERE value IS NULL;
    IF sealed > 0 THEN
        RAISE EXCEPTION
            'cannot revert 0012_secrets_encryption: % project secret(s) are encrypted and '
            'cannot be decrypted in SQL; delete them (DELETE FROM kb.project_secrets WHERE '
            'value IS NULL) and set them again after the downgrade', sealed;
    END IF;
END
$$;

COMMENT ON COLUMN kb.project_secrets.value IS NULL;

ALTER TABLE kb.project_secrets
    DROP CONSTRAINT project_secrets_sealed_or_plain,
    DROP COLUMN ciphertext,
    DROP COLUMN nonce,
    DROP COLUMN wrapped_key,
    DROP COLUMN key_id,
    ALTER COLUMN value SET NOT NULL;
