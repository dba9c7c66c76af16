"""Settings values that :mod:`agentfleet.config` reads and the rest of the tree consumes:
model prices (`model_prices`), model quotas and project weights (`quota_settings`), the gRPC
server limits (`server_limits`) and the trigger limits (`trigger_limits`). Plain values and
their parsers: they import nothing of the library, so config can import them and nothing
here imports config.
"""
