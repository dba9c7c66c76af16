"""``${NAME}`` interpolation of MCP server settings from project secrets only."""

from __future__ import annotations

import base64
import json
import secrets
import time
from urllib.parse import quote, quote_plus

import pytest

from agentfleet.errors import InvalidArgument
from agentfleet.mcp.config import references
from agentfleet.mcp.servers import McpServerConfig
from agentfleet.secrets.values import MissingSecretError, ProjectSecrets, interpolate
from services.toolpool.mcp import resolve_server
from services.toolpool.mcp.redaction import redact_structure, redactor


def test_replaces_references_and_keeps_other_text() -> None:
    text = interpolate(
        "Bearer ${TOKEN} for ${_user1}", {"TOKEN": "t0k", "_user1": "ann"}, field="f"
    )
    assert text == "Bearer t0k for ann"


def test_double_dollar_escapes_a_literal_reference() -> None:
    assert interpolate("$${TOKEN} and ${TOKEN}", {"TOKEN": "x"}, field="f") == "${TOKEN} and x"


def test_text_without_references_is_unchanged_and_dollars_alone_are_fine() -> None:
    assert interpolate("cost: $5 {braces} $HOME", {}, field="f") == "cost: $5 {braces} $HOME"


def test_never_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_LEAK_CHECK", "from-env")
    with pytest.raises(MissingSecretError) as caught:
        interpolate("${AGENTFLEET_LEAK_CHECK}", {}, field="mcp_server.url")
    assert "from-env" not in caught.value.message


def test_missing_secret_names_the_secret_and_the_field() -> None:
    with pytest.raises(MissingSecretError) as caught:
        interpolate(
            "Bearer ${API_TOKEN}", {"OTHER": "x"}, field="mcp_server.headers[Authorization]"
        )
    assert caught.value.missing == [("API_TOKEN", "mcp_server.headers[Authorization]")]
    assert "${API_TOKEN}" in caught.value.message
    assert "mcp_server.headers[Authorization]" in caught.value.message


@pytest.mark.parametrize("text", ["${}", "${1ABC}", "${A-B}", "${OPEN", "x ${ y}"])
def test_malformed_reference_is_invalid_argument_naming_the_field(text: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        interpolate(text, {"ABC": "v", "A": "v", "OPEN": "v", "y": "v"}, field="mcp_server.args[2]")
    assert caught.value.violations[0].field == "mcp_server.args[2]"


def test_references_lists_names_in_order_without_escapes() -> None:
    assert references("${B}$${A}${C}${B}", field="f") == ["B", "C", "B"]


def test_resolve_server_fills_env_args_url_and_headers() -> None:
    stdio = McpServerConfig(
        project_id="p",
        name="s",
        transport="stdio",
        command="run-${NOT_INTERPOLATED}",
        args=("--key=${KEY}",),
        env={"API_KEY": "${KEY}"},
    )
    resolved = resolve_server(stdio, {"KEY": "k1"})
    assert resolved.args == ("--key=k1",)
    assert resolved.env == {"API_KEY": "k1"}
    # The command is not a place for secrets (DESIGN §8 names env, args, url, headers).
    assert resolved.command == "run-${NOT_INTERPOLATED}"

    http = McpServerConfig(
        project_id="p",
        name="h",
        transport="sse",
        url="https://example.test/${TENANT}/sse",
        headers={"Authorization": "Bearer ${KEY}"},
    )
    resolved = resolve_server(http, {"KEY": "k1", "TENANT": "acme"})
    assert resolved.url == "https://example.test/acme/sse"
    assert resolved.headers == {"Authorization": "Bearer k1"}


def test_resolve_server_reports_every_missing_secret_at_once() -> None:
    config = McpServerConfig(
        project_id="p",
        name="h",
        transport="streamable_http",
        url="https://example.test/${TENANT}",
        headers={"X-Key": "${KEY}", "X-Other": "${KEY2}"},
    )
    with pytest.raises(MissingSecretError) as caught:
        resolve_server(config, {"KEY2": "v"})
    assert caught.value.missing == [
        ("TENANT", "mcp_server.url"),
        ("KEY", "mcp_server.headers[X-Key]"),
    ]


def test_a_changed_secret_changes_the_fingerprint() -> None:
    config = McpServerConfig(
        project_id="p", name="s", transport="stdio", command="c", env={"A": "${S}"}
    )
    first = resolve_server(config, {"S": "1"}).fingerprint()
    assert resolve_server(config, {"S": "1"}).fingerprint() == first
    assert resolve_server(config, {"S": "2"}).fingerprint() != first


def test_plain_python_runs_on_the_toolpools_interpreter() -> None:
    import sys

    from services.toolpool.mcp.connection import stdio_command

    assert stdio_command("python") == sys.executable
    assert stdio_command("python3") == sys.executable
    assert stdio_command("/usr/bin/python3") == "/usr/bin/python3"
    assert stdio_command("mcp-server-time") == "mcp-server-time"


def test_a_secret_that_does_not_decrypt_is_reported_as_such() -> None:
    config = McpServerConfig(
        project_id="p", name="api", transport="sse", url="https://x.test/${A}?k=${B}"
    )
    secrets = ProjectSecrets({}, undecryptable={"B": "key 'old' is not configured"})
    with pytest.raises(MissingSecretError) as caught:
        resolve_server(config, secrets)
    assert caught.value.message == (
        "project secret not set: ${A} in mcp_server.url; project secret cannot be decrypted: "
        "${B} in mcp_server.url (key 'old' is not configured)"
    )


NASTY = 'p@ss wörd/"quoted" 100%+\\x'


@pytest.mark.parametrize(
    "form",
    [
        NASTY,
        quote(NASTY),
        quote(NASTY, safe=""),
        quote_plus(NASTY),
        quote(NASTY, safe="").lower(),
        quote(quote(NASTY, safe=""), safe=""),
        json.dumps(NASTY)[1:-1],
        json.dumps(NASTY, ensure_ascii=False)[1:-1],
        repr(NASTY)[1:-1],
        base64.b64encode(NASTY.encode()).decode(),
        base64.urlsafe_b64encode(NASTY.encode()).decode().rstrip("="),
        # What an HTTP client does to a query: some characters encoded, others not.
        NASTY.replace(" ", "%20").replace('"', "%22").replace("ö", "%C3%B6"),
    ],
)
def test_redaction_removes_every_form_of_a_secret(form: str) -> None:
    redact = redactor({"PASSWORD": NASTY, "OTHER": "unrelated-value"})
    text = redact(f"cannot connect to https://api.test/?p={form}&x=1: refused")
    assert text == "cannot connect to https://api.test/?p=***&x=1: refused"


def test_redaction_leaves_short_values_and_other_text_alone() -> None:
    redact = redactor({"PIN": "123", "TOKEN": "tok-123456"})
    assert redact("port 123, token tok-123456") == "port 123, token ***"
    assert redactor({})("nothing to hide") == "nothing to hide"
    nested = {"content": [{"type": "text", "text": "echo: tok-123456"}], "n": 1}
    assert redact_structure(nested, redact) == {
        "content": [{"type": "text", "text": "echo: ***"}],
        "n": 1,
    }


@pytest.mark.parametrize(
    ("value", "form"),
    [
        # A JSON error quoting a URL an HTTP client encoded: two layers.
        (NASTY, json.dumps(NASTY.replace(" ", "%20").replace('"', "%22"))[1:-1]),
        (NASTY, json.dumps(quote(NASTY, safe=""))[1:-1]),
        # A value that looks encoded itself, with its other characters encoded around it.
        ("a%41b c-x", "a%41b%20c-x"),
        ("%0a\\n-x", quote("%0a\\n-x", safe="")),
        # Characters beyond the BMP: JSON writes a surrogate pair; percent, 4 bytes.
        ("k\U0001f600y\u2603", json.dumps("k\U0001f600y\u2603")[1:-1]),
        ("k\U0001f600y\u2603", quote("k\U0001f600y\u2603").lower()),
        # Percent bytes that are no UTF-8 character stay as written.
        ('"%c0-x', "%22%c0-x"),
    ],
)
def test_redaction_removes_mixed_and_layered_forms(value: str, form: str) -> None:
    text = redactor({"V": value})(f"GET https://api.test/?a=%20&p={form}&b=c+d: refused")
    assert text == "GET https://api.test/?a=%20&p=***&b=c+d: refused"


def test_redaction_masks_each_occurrence_and_keeps_the_text_between() -> None:
    redact = redactor({"A": "alpha-1", "B": "bravo 2"})
    assert redact("alpha-1 bravo%202 alpha-1alpha-1 \\u0061lpha-1 x") == "*** *** ****** *** x"
    # Overlapping values are masked as one.
    assert redactor({"A": "abcdef", "B": "defghi"})("<abcdefghi>") == "<***>"


def test_building_and_using_a_redactor_costs_no_pattern_per_value() -> None:
    """8 values of 16 KiB took 18.6 s to build (one regex, ~8 alternatives per character)."""
    values = [secrets.token_urlsafe(12288)[:16384] for _ in range(8)]
    started = time.perf_counter()
    redact = redactor(values)
    text = redact(f"error: {quote(values[3])} and {json.dumps(values[5])}")
    elapsed = time.perf_counter() - started
    assert text == 'error: *** and "***"'
    assert elapsed < 0.5, f"{elapsed:.2f} s"
