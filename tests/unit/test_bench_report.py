"""The bench report's plumbing: which printed lines become notes, and the README's
headline block written from a full run."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from _parse import parse_output  # noqa: E402
from run_all import README_END, README_START, update_readme  # noqa: E402


def test_context_lines_are_notes_and_figures_are_figures() -> None:
    parsed = parse_output(
        "CallTool get_entity, sequential  p50 2.25 ms  p99 7.78 ms\n"
        "  database round trips: 828 for the run of 200 steps = 4.14 per step\n"
        "all 500 watchers subscribed in   0.61 s\n"
        "something new\n"
    )
    assert [p.label for p in parsed.percentiles] == ["CallTool get_entity, sequential"]
    assert parsed.info == [
        "database round trips: 828 for the run of 200 steps = 4.14 per step",
        "all 500 watchers subscribed in   0.61 s",
    ]
    assert parsed.unparsed == ["something new"]


def test_readme_block_is_replaced_and_the_rest_kept(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{README_START}\nold numbers\n{README_END}\n\n## Next\n")
    update_readme(
        ["## Headline numbers", "", "```", "step p50 1 ms", "```"], written="d", path=readme
    )
    assert readme.read_text() == (
        f"# x\n\n{README_START}\nFrom `bench/RESULTS.md` (d):\n\n```\nstep p50 1 ms\n```\n"
        f"{README_END}\n\n## Next\n"
    )


def test_readme_without_markers_is_left_alone(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# x\n")
    update_readme(["numbers"], written="d", path=readme)
    assert readme.read_text() == "# x\n"
