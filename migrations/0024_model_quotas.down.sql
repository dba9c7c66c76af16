DROP TABLE kb.model_quota_budgets;
