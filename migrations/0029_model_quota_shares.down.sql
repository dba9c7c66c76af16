ALTER TABLE kb.model_quota_budgets DROP COLUMN shares, DROP COLUMN vclock, DROP COLUMN version;
