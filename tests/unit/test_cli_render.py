"""The CLI's one way to the terminal (:mod:`agentfleet.cli.render`): every control character
but newline and tab comes out as a visible one, one for one, whatever renders it, markup in
a string prints as written, and the CLI's own styles and a failure line pass through it."""

from __future__ import annotations

import io
import re

import pytest
from rich.live import Live
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from agentfleet.cli.failure import report
from agentfleet.cli.render import InertConsole, inert

CONTROLS = "".join(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x202E, 0x2066))
SGR = re.compile(r"\x1b\[[0-9;]*m")


def _controls(text: str) -> set[str]:
    return {hex(ord(c)) for c in text if c in CONTROLS and c not in "\n\t"}


def test_every_control_but_newline_and_tab_is_replaced_one_for_one() -> None:
    shown = inert(CONTROLS)
    assert len(shown) == len(CONTROLS)
    assert not _controls(shown)
    assert shown[0x1B] == "␛"
    assert shown[0x09:0x0B] == "\t\n"
    assert inert("plain text, ünïcode, 漢字") == "plain text, ünïcode, 漢字"


@pytest.mark.parametrize("force_terminal", [False, True])
def test_no_renderable_lets_a_control_or_markup_through(force_terminal: bool) -> None:
    hostile = f"a{CONTROLS}b [link=http://x]c[/link] [bold]d[/bold] :smile:"
    out = io.StringIO()
    console = InertConsole(file=out, force_terminal=force_terminal, width=400)
    console.print(hostile)
    table = Table("column")
    table.add_row(hostile)
    console.print(table)
    tree = Tree(hostile)
    tree.add(Text(hostile, style="bold"))
    console.print(tree)
    console.print_json(data={"x": hostile})
    with Live(Text(hostile), console=console, transient=True) as live:
        live.update(Text(hostile + "!"))
    console.print(Text.assemble(("ours", "red"), " ", hostile))
    written = out.getvalue()
    rest = SGR.sub("", written) if force_terminal else written
    if force_terminal:
        rest = re.sub(r"\x1b\[\d*[AK]|\x1b\[\?25[lh]|\r", "", rest)  # the live view's own
        assert "\x1b[31mours" in written  # the CLI's own style is still a style
    assert not _controls(rest), rest
    assert "[link=http://x]c[/link] [bold]d[/bold] :smile:" in written
    assert "\x1b]8;" not in written  # no hyperlink escape from the markup


def test_a_failure_line_is_inert(capsys: pytest.CaptureFixture[str]) -> None:
    assert report("NOT_FOUND", "tool \x1b]0;title\x07 \x1b[2J\x9b not found") == 1
    err = capsys.readouterr().err
    assert err == "agentfleet: NOT_FOUND: tool ␛]0;title␇ ␛[2J\ufffd not found\n"
