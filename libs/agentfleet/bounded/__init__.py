"""Bounded work on what tenants, models and MCP servers supply: schema expansion bounds and
checks (`tenant_schema`, `schema_expansion`), validation off the event loop in a killable
process pool with a time limit (`schema_pool`), and RE2 for tenant regexes
(`tenant_regex`). Everything here refuses or bounds before it runs; it uses config and
errors only.
"""
