-- One identity per service (issue #15): a service token names the service that presents it
-- (executor, dispatcher, toolpool or history), and the gRPC interceptor lets it call only
-- that service's methods (agentfleet.auth.SERVICE_METHODS).
--
-- Service tokens created before this migration name no service and could call anything;
-- they are REVOKED here (revoked_at = now()) and named 'legacy', so the CHECK holds. Create
-- one token per service with `agentfleet token create --role service --service <name>`.
ALTER TABLE kb.api_tokens ADD COLUMN service text;

UPDATE kb.api_tokens
SET service = 'legacy', revoked_at = coalesce(revoked_at, now())
WHERE role = 'service';

ALTER TABLE kb.api_tokens
    ADD CONSTRAINT api_tokens_service_named CHECK (
        (role = 'service') = (service IS NOT NULL)
        AND (service IS NULL OR service IN ('executor', 'dispatcher', 'toolpool', 'history', 'legacy'))
    );
