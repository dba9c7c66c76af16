"""An external agent's A2A Agent Card, from its definition: never its system prompt, model
or configuration, which are the project's own."""

from __future__ import annotations

from a2a.types import a2a_pb2 as a2a

from agentfleet.v1 import common_pb2

PROTOCOL_VERSION = "1.0"
BEARER_SCHEME = "bearer"
MODES = ["text/plain", "application/json"]


def agent_card(
    definition: common_pb2.AgentDefinition,
    url: str,
    *,
    grpc_target: str = "",
    tenant: str = "",
) -> a2a.AgentCard:
    """``url``: the agent's base URL, where its JSON-RPC endpoint is; ``grpc_target``
    (host:port) and ``tenant``: the gRPC binding's interface, listed after JSON-RPC when
    served."""
    description = definition.description or f"agentfleet agent {definition.name}"
    skills = [
        a2a.AgentSkill(
            id=definition.name,
            name=definition.name,
            description=description,
            tags=list(definition.tags) or ["agentfleet"],
            input_modes=MODES,
            output_modes=MODES,
        )
    ]
    skills += [
        a2a.AgentSkill(
            id=f"tool:{tool}",
            name=tool,
            description=f"uses the tool {tool}",
            tags=["tool"],
        )
        for tool in definition.tools
    ]
    card = a2a.AgentCard(
        name=definition.name,
        description=description,
        version=str(definition.version or 1),
        supported_interfaces=[
            a2a.AgentInterface(
                url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION
            ),
            *(
                [
                    a2a.AgentInterface(
                        url=grpc_target,
                        protocol_binding="GRPC",
                        protocol_version=PROTOCOL_VERSION,
                        tenant=tenant,
                    )
                ]
                if grpc_target
                else []
            ),
        ],
        capabilities=a2a.AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=skills,
    )
    card.security_schemes[BEARER_SCHEME].http_auth_security_scheme.CopyFrom(
        a2a.HTTPAuthSecurityScheme(
            scheme="Bearer", description="an agentfleet project token (member or admin)"
        )
    )
    requirement = card.security_requirements.add()
    requirement.schemes[BEARER_SCHEME].SetInParent()  # no scopes: a bearer token
    return card
