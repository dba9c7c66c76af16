"""Nothing a tenant, a model or a model provider writes can drive the operator's terminal:
control sequences in a model answer, a run's input and an error text come out of every
command that prints them as visible, inert characters, and Rich markup in them prints as
written. Checked through the commands' real output: in this process without a terminal,
and as a child process with Rich forced to colour and a live view (``FORCE_COLOR``), where
the only escapes are Rich's own styling and cursor moves."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from pathlib import Path

from agentfleet.gemini_stub import GeminiStub, Reply, Script
from agentfleet.testing.cli_process import start_agentfleet
from tests.e2e.cli_harness import MARKER, Cli, cli, install

__all__ = ["cli"]

ATTACK = (
    "\x1b]0;owned title\x07"  # window title
    "\x1b[2J"  # clear the screen
    "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # write the clipboard
    "\x1b[1A\x1b[2K\rAll checks passed\n"  # a forged line over the one above
    "\x9b31m"  # C1 CSI
    "[link=http://x]click[/link] [bold]markup[/bold]"
)
LITERAL_MARKUP = "[link=http://x]click[/link] [bold]markup[/bold]"
RICH_OWN = re.compile(r"\x1b\[[0-9;]*m|\x1b\[\d*[AK]|\x1b\[\?25[lh]|\r")
"""What Rich itself writes when it colours (SGR) and redraws a live view (cursor up, erase
line, hide/show cursor, carriage return): the attack's own are checked for separately."""


def assert_inert(output: str, *, whole: bool = True, styled: bool = False) -> None:
    """``output`` holds no control character but newline and tab (and, ``styled``, Rich's
    own sequences) and no raw piece of the attack; where the text is printed ``whole`` (not
    cut to a preview), each of its controls is there as a visible character."""
    # Rich's live view moves the cursor up itself: the forged line is told by its text.
    for raw in ("\x1b]", "\x1b[2J", "\x9b", "\x07", "\rAll checks", "\x1b[2KAll checks"):
        assert raw not in output, (raw, output)
    if not styled:
        assert "\x1b[1A" not in output
    rest = RICH_OWN.sub("", output) if styled else output
    controls = {hex(ord(c)) for c in rest if _control(c)}
    assert not controls, (controls, output)
    assert "␛" in output, output  # ESC shown as its picture, in a preview too
    if whole:
        for shown in (
            "␛]0;owned title",
            "␛[2J",
            "␛]52;c;ZWNobyBwd25lZA==",
            "␛[1A␛[2K",
            "\ufffd31m",
        ):
            assert shown in output, (shown, output)


def _control(char: str) -> bool:
    code = ord(char)
    return (code < 0x20 and char not in "\n\t") or 0x7F <= code < 0xA0


async def test_model_answer_input_and_error_text_are_inert_in_every_command(
    cli: Cli, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    await install(cli, tmp_path)
    replies = [Reply(text=ATTACK), Reply(text="ok"), Reply(error_status=400, error_message=ATTACK)]
    gemini_stub.add_script(Script(name="attack", match_system=MARKER, replies=replies))
    # The model's answer, through the live view and its final tree and summary.
    code, out, err = await cli("run", "helper", "answer please")
    assert code == 0, err
    assert_inert(out)
    assert LITERAL_MARKUP in out
    answered = await _newest_run(cli)
    # The run's input, printed back by show and runs.
    code, out, err = await cli("run", "helper", f"input {ATTACK}")
    assert code == 0, err
    given = await _newest_run(cli)
    # An error text: the provider's message, in the run's error.
    code, out, _ = await cli("run", "helper", "error please")
    assert code == 1
    assert_inert(out)
    failed = await _newest_run(cli)

    for argv, whole in (
        (("show", answered), True),
        (("show", given), True),
        (("show", failed), True),
        (("show", answered, "--messages"), False),
        (("runs",), False),
    ):
        code, out, err = await cli(*argv)
        assert code == 0, (argv, err)
        assert_inert(out, whole=whole)
        if whole:
            assert LITERAL_MARKUP in out, (argv, out)
    code, out, _ = await cli("show", answered, "--message", await _last_message(cli, answered))
    assert code == 0
    assert "\x1b" not in out
    assert "\\u001b" in out  # pretty JSON: escaped, as JSON writes it
    # An error line quoting what the caller sent (the service quotes it escaped already;
    # tests/unit/test_cli_render.py sends the raw kind through the same line).
    code, _, err = await cli("show", f"{uuid.uuid4()}{ATTACK}")
    assert code == 2
    assert err.startswith("agentfleet: INVALID_ARGUMENT: run_id: ")
    assert not {c for c in err if _control(c) and c != "\n"}, err


async def test_forced_colour_and_live_view_write_only_riches_own_escapes(
    cli: Cli, gemini_stub: GeminiStub, tmp_path: Path
) -> None:
    await install(cli, tmp_path)
    gemini_stub.add_script(
        Script(name="attack", match_system=MARKER, replies=[Reply(text=ATTACK)] * 4)
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTFLEET_")},
        **cli.environ,
        "FORCE_COLOR": "1",
        "COLUMNS": "160",
    }
    out = await _agentfleet(env, "run", "helper", f"input {ATTACK}")
    assert "\x1b[" in out  # coloured and live: Rich's own escapes are there
    assert_inert(out, styled=True)
    run_id = await _newest_run(cli)
    for argv, whole in (
        (("show", run_id), True),
        (("runs",), False),
        (("show", run_id, "--messages"), False),
    ):
        out = await _agentfleet(env, *argv)
        assert_inert(out, whole=whole, styled=True)


async def _agentfleet(env: dict[str, str], *argv: str) -> str:
    process = await start_agentfleet(*argv, env=env, merge_stderr=True)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, (argv, out)
    return out.decode()


async def _newest_run(cli: Cli) -> str:
    listed = await cli.json_lines("runs", "--limit", "1")
    return str(listed[0]["runs"][0]["id"])


async def _last_message(cli: Cli, run_id: str) -> str:
    messages = (await cli.json_lines("show", run_id, "--messages"))[0]["messages"]
    return str(messages[-1]["id"])


async def test_an_agents_description_is_inert_in_the_listing(cli: Cli, tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    agent = {
        "name": "hostile",
        "description": ATTACK.replace("\n", " "),
        "system_prompt": f"You answer. {MARKER}",
        "model": {"provider": "google", "name": "gemini-2.5-flash"},
        "tools": [],
        "visibility": "external",
    }
    manifest.write_text(
        json.dumps({"name": "hostile", "version": "1.0.0", "description": "x", "agents": [agent]})
    )
    code, out, err = await cli("install", str(manifest))
    assert (code, err) == (0, ""), out
    code, out, err = await cli("agents")
    assert code == 0, err
    assert_inert(out, whole=False)
