"""The shared model-quota limiter: one budget per model and credential, shared by every
process through PostgreSQL (`quota_store`, `quota_shares` for fair shares across processes),
a process's budget of slots and waiters (`quota_budget`, `quota_queue`), the arithmetic of
windows and grants (`quota_math`), waits made visible (`quota_wait`), and the limiter every
model call goes through (`quota`). Uses the library's postgres, settings and observability.
"""
