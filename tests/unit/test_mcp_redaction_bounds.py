"""Redacting only the start of a text that can be shown (docs/SECURITY.md §7).

A server's error can be megabytes and only its start reaches the model, so the redactor reads
that start plus the longest form a secret value can take: a form begun before the cut is
masked whole, never shown in part, and what is shown is what redacting everything would
show there.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import pytest

from services.toolpool.mcp.content import redacted_error
from services.toolpool.mcp.redaction import (
    MASK,
    MAX_MESSAGE_CHARS,
    Redactor,
    cut_note,
    redact_structure,
    redactor,
)
from services.toolpool.results import MAX_RESULT_BYTES, bound_result, json_size

SECRET = "Kq7 Wälder-Zx9Rt\U0001f600"
FILLER = "-\\t%20-+ab"  # escapes, percent-encoding and "+": every view has work


def _longest(value: str) -> str:
    """``value`` with each character written its longest way a view decodes: ``\\U`` and
    eight hex digits, or each UTF-8 byte as ``%25XX`` (percent-encoded twice)."""
    out = []
    for char in value:
        escaped = f"\\U{ord(char):08x}"
        twice = "".join(f"%25{byte:02X}" for byte in char.encode())
        out.append(max(escaped, twice, key=len))
    return "".join(out)


FORMS = {
    "raw": SECRET,
    "percent": quote(SECRET, safe=""),
    "percent twice": quote(quote(SECRET, safe=""), safe=""),
    "json": json.dumps(SECRET)[1:-1],  # the emoji as a surrogate pair
    "base64": base64.b64encode(SECRET.encode()).decode(),
    "longest": _longest(SECRET),
}


def _pieces(form: str) -> set[str]:
    """Every 4 characters in a row of ``form``: what a form cut in two would show."""
    return {form[i : i + 4] for i in range(len(form) - 3)}


def _filler(chars: int) -> str:
    text = (FILLER * (chars // len(FILLER) + 1))[:chars]
    # Not a lone backslash: before an escaped form it would escape the form's own one
    # (a mix no encoder writes, which the redactor does not match anywhere).
    return text[:-1] + "-" if text.endswith("\\") else text


def test_the_longest_form_of_a_value_is_what_the_views_read_at_most() -> None:
    # a: \U00000061 (10); é: 10; 中: %25E4%25B8%25AD (15); 😀: four bytes twice-encoded (20).
    value = "a\u00e9\u4e2d\U0001f600"
    redact = redactor({"V": value})
    assert redact.longest_form == 10 + 10 + 15 + 20 == len(_longest(value))
    assert redact(f"x {_longest(value)} y") == f"x {MASK} y"
    assert redactor({"S": SECRET}).longest_form == len(FORMS["longest"])
    assert all(len(form) <= redactor({"S": SECRET}).longest_form for form in FORMS.values())
    assert redactor({}).longest_form == 0


@pytest.mark.parametrize("name", sorted(FORMS))
def test_a_form_across_the_cut_is_masked_whole_wherever_it_begins(name: str) -> None:
    form = FORMS[name]
    redact = redactor({"S": SECRET, "OTHER": "unrelated"})
    assert redact(form) == MASK  # the redactor finds this form at all
    limit = 1000
    # Every start from ending just at the cut to beginning just after it.
    for start in range(limit - len(form) - 1, limit + 2):
        text = _filler(start) + form + _filler(3000)
        shown, covered = redact.start(text, limit)
        leaked = sorted(_pieces(form) & {shown[i : i + 4] for i in range(len(shown))})
        assert not leaked, (start, leaked, shown[-40:])
        # What is shown is what redacting all of the text shows there.
        assert redact(text).startswith(shown), start
        assert len(shown) <= limit + len(MASK)
        assert covered >= limit
        end = start + len(form)
        if start < limit < end:  # across the cut: masked whole, nothing after it
            assert shown.endswith(MASK), start
            assert covered == end
        elif end <= limit:
            assert shown.endswith(MASK + text[end:limit]), start
            assert covered == limit
        else:
            assert (shown, covered) == (text[:limit], limit)


def test_a_long_message_is_cut_after_its_start_and_says_so() -> None:
    redact = redactor({"S": SECRET})
    message = f"error: {SECRET} " + _filler(MAX_MESSAGE_CHARS)
    message = message[: MAX_MESSAGE_CHARS - 5] + FORMS["percent"] + _filler(2_000_000)
    cut = redact.bounded(message)
    assert cut.endswith(cut_note(MAX_MESSAGE_CHARS))
    shown = cut.removesuffix(cut_note(MAX_MESSAGE_CHARS))
    assert shown.startswith(f"error: {MASK} ")
    assert shown.endswith(MASK)  # the form across the cut
    assert redact(message).startswith(shown)
    for form in FORMS.values():
        assert not _pieces(form) & {cut[i : i + 4] for i in range(len(cut))}
    # A message of normal size is redacted as before, whole, with no note.
    assert redact.bounded(f"refused: {SECRET}") == f"refused: {MASK}"
    assert redactor({}).bounded("x" * 5000) == "x" * MAX_MESSAGE_CHARS + cut_note(MAX_MESSAGE_CHARS)


def _spying(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text the redactor searches."""
    read: list[int] = []
    search = Redactor._spans

    def spans(self: Redactor, text: str) -> list[tuple[int, int]]:
        read.append(len(text))
        return search(self, text)

    monkeypatch.setattr(Redactor, "_spans", spans)
    return read


def test_a_huge_error_result_costs_the_redactor_its_shown_start_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    redact = redactor({"S": SECRET})
    read = _spying(monkeypatch)
    # 40 blocks of 250,000 characters: 10 million, of which 64 KiB can be shown.
    block = {"type": "text", "text": _filler(249_000) + FORMS["percent twice"] + _filler(1000)}
    mapped = {"content": [block] * 40, "structured_content": {"big": "x" * 1_000_000}}
    shown, message, sent = redacted_error(mapped, redact)
    assert sum(read) <= MAX_RESULT_BYTES + MAX_MESSAGE_CHARS + 2 * redact.longest_form + 100
    assert sent == json_size(mapped)
    # What follows the cut is left out, and the cut text says so.
    assert len(shown["content"]) == 1
    assert "structured_content" not in shown
    assert shown["content"][0]["text"].endswith(cut_note(MAX_RESULT_BYTES))
    assert message.endswith(cut_note(MAX_MESSAGE_CHARS))
    assert len(message) == MAX_MESSAGE_CHARS + len(cut_note(MAX_MESSAGE_CHARS))


def test_a_result_of_a_million_values_is_read_only_as_far_as_it_can_be_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    redact = redactor({"S": SECRET})
    read = _spying(monkeypatch)
    numbers: dict[str, Any] = {"values": list(range(1_000_000)), "after": SECRET}
    shown = redact_structure(numbers, redact, MAX_RESULT_BYTES)
    # Each value counts one character: the walk stops there and a note takes the place
    # of the rest (a cut is never silent).
    assert len(shown["values"]) < MAX_RESULT_BYTES
    assert shown["values"][-1] == cut_note(MAX_RESULT_BYTES).lstrip()
    assert shown["values"][:-1] == list(range(len(shown["values"]) - 1))
    assert "after" not in shown
    assert sum(read) == len("values")


def test_the_shown_result_is_what_redacting_all_of_it_then_bounding_shows() -> None:
    redact = redactor({"S": SECRET, "T": "second-secret-value"})
    # No backslash or quote in the text, so JSON writes it as it is and the preview's
    # size is known; secret forms before, across and after the 64 KiB cut.
    plain = ("-%20-+ab" * 10_000)[:20_000]
    # The text's budget: 64 KiB less what comes before it ({"content":[{"type":"text","text":).
    cut = MAX_RESULT_BYTES - 1 - len("content") - 1 - 1 - len("type") - len("text") - len("text")
    text = plain + FORMS["percent"] + plain + FORMS["raw"] + plain + "second-secret-value"
    text += plain[: cut - 5 - len(text)] + FORMS["percent"]
    assert text.index(FORMS["percent"], 20_100) == cut - 5
    text += "".join(f"{plain[:20]}{FORMS['raw']}" for _ in range(40_000))
    mapped = {"content": [{"type": "text", "text": text}], "structured_content": {"n": 1}}
    shown, message, sent = redacted_error(mapped, redact)
    everything = redact_structure(mapped, redact)
    assert sent == json_size(mapped)
    ours = bound_result(shown, sent_size=sent)
    theirs = bound_result(everything, sent_size=sent)
    assert ours.truncated
    assert theirs.truncated
    assert ours.result == theirs.result
    assert ours.size_bytes == sent  # the size the server sent, not what was read
    for form in (*FORMS.values(), "second-secret-value"):
        assert not _pieces(form) & {message[i : i + 4] for i in range(len(message))}
    assert redact("\n".join(b["text"] for b in everything["content"])).startswith(
        message.removesuffix(cut_note(MAX_MESSAGE_CHARS))
    )


def test_a_normal_error_result_is_redacted_whole_as_before() -> None:
    redact = redactor({"S": SECRET})
    mapped = {
        "content": [{"type": "text", "text": f"denied for {FORMS['json']}"}],
        "structured_content": {SECRET: [SECRET, 3, None, {"k": FORMS["base64"]}]},
    }
    shown, message, sent = redacted_error(mapped, redact)
    assert shown == redact_structure(mapped, redact)
    assert shown == {
        "content": [{"type": "text", "text": f"denied for {MASK}"}],
        "structured_content": {MASK: [MASK, 3, None, {"k": MASK}]},
    }
    assert message == f"denied for {MASK}"
    assert sent is None
    assert not bound_result(shown, sent_size=sent).truncated


def test_a_cut_result_is_reported_cut_even_when_what_is_left_is_small() -> None:
    redact = redactor({"S": SECRET})
    # Masks shrink what is shown below the limit: the bound still says it was cut.
    text = FORMS["longest"] * (2 * MAX_RESULT_BYTES // len(FORMS["longest"]))
    mapped = {"content": [{"type": "text", "text": text}]}
    shown, _, sent = redacted_error(mapped, redact)
    assert json_size(shown) < MAX_RESULT_BYTES
    bounded = bound_result(shown, sent_size=sent)
    assert bounded.truncated
    assert bounded.size_bytes == json_size(mapped)
    assert str(json_size(mapped)) in bounded.result["note"]
    assert cut_note(MAX_RESULT_BYTES) in bounded.result["preview"]


def test_a_key_across_the_cut_is_cut_like_any_text() -> None:
    redact = redactor({"S": SECRET})
    key = _filler(MAX_RESULT_BYTES - 5) + SECRET + "tail"
    shown = redact_structure({"k": 1, key: "value", "later": 2}, redact, MAX_RESULT_BYTES)
    assert list(shown.values()) == [1, None]
    cut_key = list(shown)[1]
    assert cut_key.endswith(MASK + cut_note(MAX_RESULT_BYTES))
    assert SECRET[:4] not in cut_key
