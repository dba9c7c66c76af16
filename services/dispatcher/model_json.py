"""The one way the dispatcher asks a model (agent choice, output evaluation): a single call
whose answer must be JSON of a given schema."""

from __future__ import annotations

import json
from typing import Any

from google.genai import types

from agentfleet.llm import ModelClient

__all__ = ["ask_for_json"]


async def ask_for_json(
    client: ModelClient, *, model: str, instruction: str, prompt: str, schema: dict[str, Any]
) -> Any:
    """The parsed answer. Errors of the call or of the parse propagate: each caller decides
    its fallback (the model is an upgrade of the dispatcher, never a dependency)."""
    reply = await client.generate(
        model=model,
        system_instruction=instruction,
        contents=[types.Content(role="user", parts=[types.Part(text=prompt)])],
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_json_schema=schema
        ),
    )
    return json.loads(reply.text)
