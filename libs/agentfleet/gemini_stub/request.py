"""One request the stub received, with the readers that scripts and tests need.

The body is kept exactly as parsed from the wire (camelCase, as google-genai sends it);
the helpers read it without converting, and :meth:`StubRequest.typed_contents` gives
google-genai ``types.Content`` when a policy wants real types.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

from google.genai import types


@dataclass(kw_only=True, slots=True)
class StubRequest:
    """A recorded ``generateContent`` or ``streamGenerateContent`` request."""

    model: str
    """Model name without the ``models/`` prefix, e.g. ``gemini-2.5-flash``."""
    method: str
    """``generateContent`` or ``streamGenerateContent``."""
    api_version: str
    """``v1``, ``v1beta`` or ``v1beta1`` (Vertex)."""
    path: str
    body: dict[str, Any]
    """The parsed JSON body as sent."""
    received_at: float
    """``time.time()`` when the request arrived."""
    script: str | None = None
    """Name of the script that answered; None when none matched."""
    body_chars: int | None = None
    """Length of the body as received (the server sets it): the prompt-size estimate reads
    it instead of serializing the body again."""

    @property
    def system_instruction(self) -> str:
        """Text of the system instruction ("" when absent)."""
        instruction = self.body.get("systemInstruction") or self.body.get("system_instruction")
        if not isinstance(instruction, dict):
            return ""
        return "".join(_texts(instruction))

    @property
    def contents(self) -> list[dict[str, Any]]:
        """The conversation as sent (JSON dicts)."""
        contents = self.body.get("contents")
        return contents if isinstance(contents, list) else []

    @property
    def turn(self) -> int:
        """How many model turns the conversation already holds (0 on the first call)."""
        return sum(1 for content in self.contents if content.get("role") == "model")

    @property
    def tool_names(self) -> list[str]:
        """Names of every function declared to the model, in order."""
        return [declaration.get("name", "") for declaration in self.function_declarations()]

    def function_declarations(self) -> list[dict[str, Any]]:
        """Every function declared to the model (name, description, schema), in order."""
        found: list[dict[str, Any]] = []
        for tool in self.body.get("tools") or []:
            declarations = tool.get("functionDeclarations") or tool.get("function_declarations")
            found.extend(d for d in declarations or [] if isinstance(d, dict))
        return found

    def first_user_text(self) -> str | None:
        """Text of the oldest user turn that has any text: the task of the conversation."""
        return _user_text(self.contents)

    @property
    def generation_config(self) -> dict[str, Any]:
        config = self.body.get("generationConfig")
        return config if isinstance(config, dict) else {}

    def function_responses(self) -> list[dict[str, Any]]:
        """Every ``functionResponse`` part of the conversation, oldest first."""
        found: list[dict[str, Any]] = []
        for content in self.contents:
            for part in content.get("parts") or []:
                response = part.get("functionResponse") or part.get("function_response")
                if isinstance(response, dict):
                    found.append(response)
        return found

    def last_user_text(self) -> str | None:
        """Text of the newest user turn that has any text."""
        return _user_text(reversed(self.contents))

    def typed_contents(self) -> list[types.Content]:
        """The conversation as google-genai types."""
        return [types.Content.model_validate(content) for content in self.contents]

    def to_json(self) -> dict[str, Any]:
        """The record as the control API returns it: every field but ``body_chars``, which
        is the server's own size estimate, not part of what was received."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "body_chars"}


def _user_text(contents: Iterable[dict[str, Any]]) -> str | None:
    """Text of the first user turn of ``contents`` that has any."""
    for content in contents:
        if content.get("role", "user") == "user":
            text = "".join(_texts(content))
            if text:
                return text
    return None


def _texts(content: dict[str, Any]) -> list[str]:
    return [
        part["text"]
        for part in content.get("parts") or []
        if isinstance(part.get("text"), str) and not part.get("thought")
    ]
