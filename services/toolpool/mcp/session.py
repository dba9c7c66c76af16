"""The SDK's ``ClientSession``, with an MCP server's output schemas matched by RE2.

``ClientSession.call_tool`` checks a tool's structured result against the ``outputSchema``
the server declared, with jsonschema on the toolpool's event loop, where a ``pattern`` runs
Python's backtracking ``re``: a server declaring ``^(a+)+$`` and answering
``"a" * 26 + "!"`` would stall every project's tool calls for seconds. This subclass builds
that validator from :mod:`agentfleet.tenant_schema` instead; the rest of the session is the
SDK's. It overrides a private method of the pinned SDK (mcp in pyproject.toml), so
``tests/security/test_tenant_regex.py`` calls such a tool through the real pool.
"""

from __future__ import annotations

from typing import Any

from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from mcp import ClientSession
from referencing import Registry

from agentfleet.tenant_schema import check_schema, validator_class


class Re2ClientSession(ClientSession):
    def _output_schema_validator(self, name: str, output_schema: dict[str, Any]) -> Validator:
        # As the SDK's: one compiled validator per listed schema, evicted by the SDK when
        # a listing changes the schema; a broken schema is a RuntimeError on every call.
        if (validator := self._tool_output_validators.get(name)) is not None:
            return validator
        cls = validator_class(output_schema)
        try:
            check_schema(output_schema, cls)
        except SchemaError as e:
            raise RuntimeError(f"Invalid schema for tool {name}: {e.message}") from None
        # An explicit empty registry: $refs resolve within the schema and the metaschemas.
        validator = cls(output_schema, registry=Registry())
        self._tool_output_validators[name] = validator
        return validator
