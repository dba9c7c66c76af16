"""Model settings of an agent definition (the jsonb column ``kb.agent_definitions.model``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_PROVIDER = "google"
DEFAULT_MODEL_NAME = "gemini-2.5-flash"


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    """Model settings of a definition (the jsonb column ``model``)."""

    provider: str = DEFAULT_PROVIDER
    """Model provider; "google" (Gemini through google-genai) is the only one today."""
    name: str = DEFAULT_MODEL_NAME
    temperature: float | None = None
    """None uses the model's default."""
    max_output_tokens: int | None = None
    """None uses the model's default."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Further generation settings (google-genai GenerateContentConfig names), only those
    ``$defs/model_extra`` of manifest.schema.json allows; checked on write and again before
    each run."""
    fallback_models: tuple[str, ...] = ()
    """Tried in order when the model before keeps failing
    (:mod:`services.executor.model.fallback`)."""
    fallback_wait_s: float | None = None
    """With fallbacks: the longest a call waits for a model's quota before the next model;
    None: the executor's maximum quota wait."""

    def to_json(self) -> dict[str, Any]:
        """The jsonb document stored in ``agent_definitions.model``."""
        optional = {
            "temperature": self.temperature,
            "max_output_tokens": self.max_output_tokens,
            "extra": self.extra or None,
            "fallback_models": list(self.fallback_models) or None,
            "fallback_wait_s": self.fallback_wait_s,
        }
        document: dict[str, Any] = {"provider": self.provider, "name": self.name}
        document.update({key: value for key, value in optional.items() if value is not None})
        return document

    @classmethod
    def from_json(cls, document: Mapping[str, Any] | None) -> ModelConfig:
        """Reads the stored document; missing keys take the defaults."""
        document = document or {}
        max_output = document.get("max_output_tokens")
        temperature = document.get("temperature")
        fallback_wait = document.get("fallback_wait_s")
        return cls(
            provider=document.get("provider") or DEFAULT_PROVIDER,
            name=document.get("name") or DEFAULT_MODEL_NAME,
            temperature=float(temperature) if temperature is not None else None,
            max_output_tokens=int(max_output) if max_output is not None else None,
            extra=dict(document.get("extra") or {}),
            fallback_models=tuple(str(name) for name in document.get("fallback_models") or ()),
            fallback_wait_s=float(fallback_wait) if fallback_wait is not None else None,
        )
