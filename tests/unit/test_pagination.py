import base64
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from agentfleet.errors import InvalidArgument
from agentfleet.postgres.pagination import (
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
    row_id = uuid.UUID("0b1c0000-0000-4000-8000-000000000001")
    token = encode_page_token([when, str(row_id), 42, "name"], FILTERS)
    assert "0b1c" not in token  # opaque, not a readable cursor
    kinds = (datetime, uuid.UUID, int, str)
    assert decode_page_token(token, dict(FILTERS), kinds=kinds) == [when, row_id, 42, "name"]


def test_an_empty_token_is_the_first_page() -> None:
    assert decode_page_token("", FILTERS, kinds=(str, int)) is None


def test_a_token_is_bound_to_its_filters() -> None:
    token = encode_page_token(["a", 1], FILTERS)
    with pytest.raises(InvalidArgument, match="other filters") as caught:
        decode_page_token(token, {**FILTERS, "status": "failed"}, kinds=(str, int))
    assert caught.value.violations[0].field == "page_token"


@pytest.mark.parametrize(
    "garbage", ["x", "!!!!", "eyJ9", "e30", "bm90IGpzb24", "A" * 5000, "\u00e9\u00e9"]
)
def test_garbage_is_invalid_argument(garbage: str) -> None:
    with pytest.raises(InvalidArgument, match="page_token: is not a page token"):
        decode_page_token(garbage, FILTERS, kinds=(str, int))


def test_a_token_of_another_listing_shape_is_refused() -> None:
    token = encode_page_token(["a", 1, 2], FILTERS)
    with pytest.raises(InvalidArgument):
        decode_page_token(token, FILTERS, kinds=(str, int))


WHEN = datetime(2026, 11, 27, tzinfo=UTC)
SOME_ID = "0b1c0000-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("position", "kinds"),
    [
        ([1, 2], (datetime, uuid.UUID)),
        ([WHEN.isoformat(), SOME_ID], (datetime, uuid.UUID)),  # a date written as text
        ([WHEN, "not-a-uuid"], (datetime, uuid.UUID)),
        ([WHEN, 7], (datetime, uuid.UUID)),
        (["1", SOME_ID], (int, uuid.UUID)),
        ([True, SOME_ID], (int, uuid.UUID)),
        ([1.0, SOME_ID], (int, uuid.UUID)),
        ([2**31, SOME_ID], (int, uuid.UUID)),  # past a PostgreSQL integer
        ([None], (str,)),
        ([3], (str,)),
        (["a\x00b"], (str,)),  # PostgreSQL text holds no NUL
        (["\ud800"], (str,)),  # a lone surrogate: not UTF-8
        ([WHEN.replace(tzinfo=None), SOME_ID], (datetime, uuid.UUID)),  # no offset
        # Years 1 and 9999 with an offset that takes them out of range in UTC.
        ([datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))), SOME_ID], (datetime, uuid.UUID)),
        (
            [datetime(9999, 12, 31, 23, tzinfo=timezone(-timedelta(hours=14))), SOME_ID],
            (datetime, uuid.UUID),
        ),
    ],
)
def test_a_written_token_of_other_kinds_is_invalid_argument(
    position: list[object], kinds: tuple[type, ...]
) -> None:
    # Tokens are not signed: anyone can write one. A value of the wrong kind must be refused
    # here, naming the field, not fail the listing's query (INTERNAL).
    token = encode_page_token(position, FILTERS)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="cursor: is not a page token"):
        decode_page_token(token, FILTERS, kinds=kinds, field="cursor")


def test_a_deeply_nested_token_is_invalid_argument() -> None:
    token = base64.urlsafe_b64encode(b"[" * 1500).decode()[:2040]
    with pytest.raises(InvalidArgument, match="page_token: is not a page token"):
        decode_page_token(token, FILTERS, kinds=(str, int))


def test_page_of_splits_the_lookahead_row() -> None:
    assert page_of([1, 2, 3], 2) == ([1, 2], True)
    assert page_of([1, 2], 2) == ([1, 2], False)
