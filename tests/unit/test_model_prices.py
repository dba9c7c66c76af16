"""The price table: defaults, the operator's overrides, and the cost of one call's tokens."""

from __future__ import annotations

import pytest

from agentfleet.config import ConfigError, load_settings
from agentfleet.llm import TokenUsage
from agentfleet.settings.model_prices import DEFAULT_PRICES, PriceTable, parse_prices, usd


def test_cost_prices_each_kind_of_token_at_its_own_rate() -> None:
    table = parse_prices('{"m": {"input": 1, "cached_input": 0.5, "output": 10, "thinking": 20}}')
    usage = TokenUsage(
        prompt_tokens=1_000_000,
        cached_tokens=400_000,
        output_tokens=300_000,
        thinking_tokens=100_000,
    )
    # 600k fresh input at $1 + 400k cached at $0.5 + 200k output at $10 + 100k thoughts at $20
    assert table.cost_nanos("m", usage) == (600_000 + 200_000 + 2_000_000 + 2_000_000) * 1000
    assert usd(table.cost_nanos("m", usage)) == "$4.800000"


def test_defaults_price_current_gemini_models_and_unknown_models_cost_nothing() -> None:
    table = PriceTable.with_overrides({})
    usage = TokenUsage(prompt_tokens=1_000_000, output_tokens=1_000_000)
    assert table.cost_nanos("gemini-2.5-pro", usage) == 11_250_000_000
    assert table.cost_nanos("models/gemini-2.5-flash", usage) == 2_800_000_000
    assert table.cost_nanos("no-such-model", usage) == 0


def test_an_override_replaces_one_model_and_keeps_the_other_defaults() -> None:
    settings = load_settings(
        {"AGENTFLEET_MODEL_PRICES": '{"gemini-2.5-pro": {"input": 2, "output": 4}}'}
    )
    pro = settings.model_prices.price_of("gemini-2.5-pro")
    assert pro is not None
    assert (pro.input, pro.cached_input, pro.output, pro.thinking) == (2, 2, 4, 4)
    assert settings.model_prices.price_of("gemini-2.5-flash") == DEFAULT_PRICES["gemini-2.5-flash"]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"m": {"input": -1, "output": 1}}', "m.input"),
        ('{"m": {"input": NaN, "output": 1}}', "m.input"),
        ('{"m": {"input": 1, "output": 1e308}}', "m.output"),
        ('{"m": {"input": 1, "output": "cheap"}}', "m.output"),
        ('{"m": {"input": 1, "output": true}}', "m.output"),
        ('{"m": {"input": 1}}', "m.output"),
        ('{"m": {"input": 1, "output": 1, "audio": 3}}', "m.audio"),
        ('{"m": 3}', "m"),
        ("[1]", "JSON object"),
        ("{", "not JSON"),
    ],
)
def test_hostile_prices_are_refused_naming_the_field(raw: str, field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({"AGENTFLEET_MODEL_PRICES": raw})
    assert raised.value.variable == "AGENTFLEET_MODEL_PRICES"
    assert field in str(raised.value)
