"""The SDK's ``ClientSession``, with an MCP server's output schemas checked off the event loop.

``ClientSession.call_tool`` checks a tool's structured result against the ``outputSchema``
the server declared, with jsonschema on the toolpool's event loop: a ``pattern`` ran
Python's backtracking ``re`` (``^(a+)+$`` against ``"a" * 26 + "!"``: seconds), a
``uniqueItems`` compared items pairwise, and every error of the result was built to pick
the best one; each stalls every project's tool calls. This subclass checks the result in
:mod:`agentfleet.bounded.schema_pool` instead (RE2 patterns, hashed uniqueItems, the first errors
only, a time limit); the rest of the session is the SDK's. It overrides a method of the
pinned SDK (mcp in pyproject.toml), so ``tests/security/test_tenant_regex.py`` and
``tests/security/test_schema_work.py`` call such tools through the real pool.
"""

from __future__ import annotations

import mcp_types as types
from mcp import ClientSession

from agentfleet.bounded.schema_pool import SchemaCheckTimeout, schema_pool


class Re2ClientSession(ClientSession):
    async def validate_tool_result(self, name: str, result: types.CallToolResult) -> None:
        # As the SDK's: RuntimeError when the result does not fit the listed schema.
        if name not in self._tool_output_schemas:
            await self.list_tools()
        output_schema = self._tool_output_schemas.get(name)
        if output_schema is None:
            return
        if (
            result.structured_content is None
            and "structured_content" not in result.model_fields_set
        ):
            raise RuntimeError(
                f"Tool {name} has an output schema but did not return structured content"
            )
        try:
            verdict = await schema_pool().check(
                output_schema, result.structured_content, any_draft=True
            )
        except SchemaCheckTimeout as exc:
            raise RuntimeError(f"The result of tool {name} could not be checked: {exc}") from None
        if verdict.schema_error is not None:
            raise RuntimeError(f"Invalid schema for tool {name}: it {verdict.schema_error}")
        if not verdict.ok:
            problem = verdict.problems[0]
            where = "/".join(str(p) for p in problem.path)
            raise RuntimeError(
                f"Invalid structured content returned by tool {name} at '{where}': "
                f"{problem.message}"
            )
