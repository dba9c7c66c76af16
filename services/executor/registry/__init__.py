"""The agent registry, served by the executor: agent definitions (with their model settings
and visibility), products installed from manifests (their agents and MCP servers, in one
transaction), and the AgentRegistryService that exposes both.

- ``definitions``: AgentDefinition and its repository (``kb.agent_definitions``)
- ``model_config``: a definition's model settings and the ``model.extra`` allowlist
- ``manifest`` / ``manifest_schema`` / ``manifest.schema.json``: a product manifest, validated
- ``products``: install, upgrade and uninstall of products
- ``product_store``: the statements an install runs inside its transaction
- ``server``: the gRPC servicer
"""
