"""The agent registry, served by the executor: agent definitions (with their model settings
and visibility), products installed from manifests (their agents and MCP servers, in one
transaction), and the AgentRegistryService that exposes both.

- ``definitions``: AgentDefinition and its repository (``kb.agent_definitions``)
- ``model_config``: a definition's model settings and the ``model.extra`` allowlist
- ``manifest`` / ``manifest_schema`` / ``manifest.schema.json``: a product manifest, validated
- ``products``: install, upgrade and uninstall of products
- ``product_store``: locks and request_id replays of an install, inside its transaction
- ``server``: the gRPC servicer

The MCP server rows a product brings are written through ``agentfleet.mcp.servers``, the
one repository of ``kb.mcp_servers`` (shared with the toolpool).
"""
