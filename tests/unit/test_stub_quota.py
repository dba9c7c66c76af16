"""The stub's quota mode as pure bookkeeping: parsing, fixed windows, the 429 body."""

from __future__ import annotations

import pytest

from agentfleet.gemini_stub.quota import Admission, QuotaLedger, Refusal, parse_quota


def test_parse_reads_limits_windows_and_defaults() -> None:
    quota = parse_quota("rpm=20/10s, tpm=1000, rpd=5/1h")
    assert [(q.kind, q.limit, q.window_s) for q in quota.limits] == [
        ("requests_per_minute", 20, 10.0),
        ("tokens_per_minute", 1000, 60.0),
        ("requests_per_day", 5, 3600.0),
    ]
    assert parse_quota(quota.to_text()) == quota


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("rpm", "rpm=N"),
        ("rpm=0", "> 0"),
        ("qps=3", "rpm=N"),
        ("rpm=2,rpm=3", "given twice"),
        ("rpm=2/0s", "> 0"),
    ],
)
def test_parse_refuses_a_bad_entry_naming_it(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_quota(text)


def test_requests_past_the_window_limit_are_refused_until_the_next_window() -> None:
    ledger = QuotaLedger(parse_quota("rpm=2/10s"))
    assert isinstance(ledger.admit("m", 100.0), Admission)
    assert isinstance(ledger.admit("m", 101.0), Admission)
    refused = ledger.admit("m", 107.5)
    assert isinstance(refused, Refusal)
    assert refused.retry_after_s == pytest.approx(2.5)
    # Another model has its own quota; the next window starts afresh.
    assert isinstance(ledger.admit("other", 107.5), Admission)
    assert isinstance(ledger.admit("m", 110.0), Admission)
    counts = [(w.model, w.start, w.accepted, w.refused) for w in ledger.windows()]
    assert counts == [("m", 100.0, 2, 1), ("other", 100.0, 1, 0), ("m", 110.0, 1, 0)]


def test_tokens_are_charged_to_the_window_that_admitted_the_request() -> None:
    ledger = QuotaLedger(parse_quota("tpm=100/60s"))
    first = ledger.admit("m", 0.0)
    assert isinstance(first, Admission)
    first.charge_tokens(120)
    refused = ledger.admit("m", 30.0)
    assert isinstance(refused, Refusal)
    assert refused.limit.kind == "tokens_per_minute"
    assert isinstance(ledger.admit("m", 60.0), Admission)


def test_the_refusal_is_the_gemini_api_429_body() -> None:
    ledger = QuotaLedger(parse_quota("rpm=1/10s"))
    ledger.admit("gemini-2.5-pro", 0.0)
    refused = ledger.admit("gemini-2.5-pro", 0.2)
    assert isinstance(refused, Refusal)
    error = refused.body()["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    kinds = [d["@type"].rsplit(".", 1)[1] for d in error["details"]]
    assert kinds == ["QuotaFailure", "Help", "RetryInfo"]
    violation = error["details"][0]["violations"][0]
    assert violation["quotaDimensions"]["model"] == "gemini-2.5-pro"
    assert violation["quotaValue"] == "1"
    assert error["details"][2]["retryDelay"] == "10s"  # 9.8 s left, whole seconds up
