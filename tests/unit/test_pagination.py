from datetime import UTC, datetime

import pytest

from agentfleet.errors import InvalidArgument
from agentfleet.pagination import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    clamp_page_size,
    decode_page_token,
    encode_page_token,
    page_of,
)

FILTERS = {"project_id": "p", "status": "completed"}


def test_page_size_defaults_and_clamps() -> None:
    assert clamp_page_size(0) == DEFAULT_PAGE_SIZE == 50
    assert clamp_page_size(7) == 7
    assert clamp_page_size(10_000) == MAX_PAGE_SIZE == 500
    with pytest.raises(InvalidArgument, match="page_size: must not be negative"):
        clamp_page_size(-1)


def test_a_token_round_trips_its_position() -> None:
    when = datetime(2026, 11, 21, 12, 30, 1, 123456, tzinfo=UTC)
    token = encode_page_token([when, "0b1c-id", 42], FILTERS)
    assert "0b1c" not in token  # opaque, not a readable cursor
    assert decode_page_token(token, dict(FILTERS), arity=3) == [when, "0b1c-id", 42]


def test_an_empty_token_is_the_first_page() -> None:
    assert decode_page_token("", FILTERS, arity=2) is None


def test_a_token_is_bound_to_its_filters() -> None:
    token = encode_page_token(["a", 1], FILTERS)
    with pytest.raises(InvalidArgument, match="other filters") as caught:
        decode_page_token(token, {**FILTERS, "status": "failed"}, arity=2)
    assert caught.value.violations[0].field == "page_token"


@pytest.mark.parametrize(
    "garbage", ["x", "!!!!", "eyJ9", "e30", "bm90IGpzb24", "A" * 5000, "\u00e9\u00e9"]
)
def test_garbage_is_invalid_argument(garbage: str) -> None:
    with pytest.raises(InvalidArgument, match="page_token: is not a page token"):
        decode_page_token(garbage, FILTERS, arity=2)


def test_a_token_of_another_listing_shape_is_refused() -> None:
    token = encode_page_token(["a", 1, 2], FILTERS)
    with pytest.raises(InvalidArgument):
        decode_page_token(token, FILTERS, arity=2)


def test_page_of_splits_the_lookahead_row() -> None:
    assert page_of([1, 2, 3], 2) == ([1, 2], True)
    assert page_of([1, 2], 2) == ([1, 2], False)
