"""What a model call costs: a price table per model and the cost of one call's tokens.

Costs are whole nano-dollars (USD x 10^9) so sums over a run, a tree and a project stay exact
in a ``bigint``: the cheapest price (USD 0.01 per million tokens) is 10 nano-dollars a token.

The operator's table (``AGENTFLEET_MODEL_PRICES``, JSON) overrides the defaults model by model:
``{"gemini-2.5-pro": {"input": 1.25, "cached_input": 0.125, "output": 10, "thinking": 10}}``,
each price in USD per million tokens; a model left out keeps its default, a model in neither
costs 0 (and its tokens still count against token budgets).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # agentfleet.llm imports the settings, which import this module
    from agentfleet.llm.client import TokenUsage

NANOS_PER_USD = 1_000_000_000
MAX_PRICE_PER_MILLION = 10_000.0
"""Above any real model's price (a typo guard: USD 10,000 per million tokens)."""
PRICE_KINDS = ("input", "cached_input", "output", "thinking")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelPrice:
    """USD per million tokens of one model."""

    input: float
    """Prompt tokens not served from a cache."""
    cached_input: float
    """Prompt tokens served from the context cache."""
    output: float
    """Candidate tokens."""
    thinking: float
    """Thought tokens (Gemini 2.5 bills them as output)."""


# Google AI (Gemini API) paid tier, text prompts up to 200k tokens, as published at
# https://ai.google.dev/gemini-api/docs/pricing on 2025-09-15. Longer prompts, audio input and
# Vertex AI are priced differently: set AGENTFLEET_MODEL_PRICES for them.
DEFAULT_PRICES: Mapping[str, ModelPrice] = {
    "gemini-2.5-pro": ModelPrice(input=1.25, cached_input=0.125, output=10.0, thinking=10.0),
    "gemini-2.5-flash": ModelPrice(input=0.30, cached_input=0.03, output=2.50, thinking=2.50),
    "gemini-2.5-flash-lite": ModelPrice(input=0.10, cached_input=0.01, output=0.40, thinking=0.40),
    "gemini-2.0-flash": ModelPrice(input=0.10, cached_input=0.025, output=0.40, thinking=0.40),
    "gemini-2.0-flash-lite": ModelPrice(
        input=0.075, cached_input=0.075, output=0.30, thinking=0.30
    ),
}


def model_key(model: str) -> str:
    """The table key of a model name (``models/gemini-2.5-pro`` and ``gemini-2.5-pro`` are one)."""
    return model.removeprefix("models/")


@dataclass(frozen=True, slots=True)
class PriceTable:
    """The prices in force: the operator's over the defaults."""

    prices: Mapping[str, ModelPrice]

    @classmethod
    def with_overrides(cls, overrides: Mapping[str, ModelPrice]) -> PriceTable:
        return cls({**DEFAULT_PRICES, **{model_key(k): v for k, v in overrides.items()}})

    def price_of(self, model: str) -> ModelPrice | None:
        return self.prices.get(model_key(model))

    def cost_nanos(self, model: str, usage: TokenUsage) -> int:
        """The call's cost in nano-dollars; 0 for a model without a price."""
        price = self.price_of(model)
        if price is None:
            return 0
        cached = min(usage.cached_tokens, usage.prompt_tokens)
        thinking = min(usage.thinking_tokens, usage.output_tokens)
        per_million = (
            Decimal(usage.prompt_tokens - cached) * Decimal(str(price.input))
            + Decimal(cached) * Decimal(str(price.cached_input))
            + Decimal(usage.output_tokens - thinking) * Decimal(str(price.output))
            + Decimal(thinking) * Decimal(str(price.thinking))
        )
        return int((per_million * NANOS_PER_USD / 1_000_000).to_integral_value())


def parse_prices(raw: str) -> PriceTable:
    """``AGENTFLEET_MODEL_PRICES``: a JSON object of model -> {input, cached_input, output,
    thinking} over :data:`DEFAULT_PRICES`; ValueError naming the first bad field.
    ``cached_input`` defaults to ``input`` and ``thinking`` to ``output``."""
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc.msg}") from None
    if not isinstance(document, dict):
        raise ValueError("must be a JSON object of model name -> prices")
    return PriceTable.with_overrides(
        {_model_name(name): _price(name, entry) for name, entry in document.items()}
    )


def _model_name(name: str) -> str:
    if not name or len(name) > 200 or not name.isprintable():
        raise ValueError(f"model name {name[:40]!r}: must be 1 to 200 printable characters")
    return model_key(name)


def _price(model: str, entry: Any) -> ModelPrice:
    if not isinstance(entry, dict):
        raise ValueError(f"{model}: must be an object of {', '.join(PRICE_KINDS)}")
    unknown = sorted(set(entry) - set(PRICE_KINDS))
    if unknown:
        raise ValueError(f"{model}.{unknown[0]}: unknown price (known: {', '.join(PRICE_KINDS)})")
    for required in ("input", "output"):
        if required not in entry:
            raise ValueError(f"{model}.{required}: required")
    values = {kind: price_per_million(f"{model}.{kind}", entry[kind]) for kind in entry}
    return ModelPrice(
        input=values["input"],
        cached_input=values.get("cached_input", values["input"]),
        output=values["output"],
        thinking=values.get("thinking", values["output"]),
    )


def price_per_million(field: str, value: Any) -> float:
    """A price in USD per million tokens: finite, 0 to :data:`MAX_PRICE_PER_MILLION`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{field}: must be a number (USD per million tokens)")
    if not math.isfinite(value) or value < 0 or value > MAX_PRICE_PER_MILLION:
        raise ValueError(f"{field}: must be between 0 and {MAX_PRICE_PER_MILLION:g}, got {value}")
    return float(value)


def usd(nanos: int) -> str:
    """``$0.001234`` for display (CLI, logs): six decimals, enough for one cheap call."""
    return f"${nanos / NANOS_PER_USD:.6f}"
