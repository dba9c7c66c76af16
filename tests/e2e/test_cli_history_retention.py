"""``agentfleet history prune|retention`` against the services (auth on, admin token)."""

from __future__ import annotations

from tests.e2e.cli_harness import Cli, cli
from tests.integration.retention_rows import finished_tree, surviving

__all__ = ["cli"]


async def test_retention_set_then_prune_dry_then_for_real(cli: Cli) -> None:
    project = cli.environ["AGENTFLEET_PROJECT"]
    pool = cli.stack.pool
    code, out, err = await cli("history", "retention")
    assert (code, err) == (0, "")
    assert "retention: forever" in out
    code, out, _ = await cli("history", "prune", "--dry-run")
    assert "nothing to prune" in out
    old = await finished_tree(pool, project, age_days=10, children=1)
    code, out, err = await cli("history", "retention", "--days", "7")
    assert (code, err) == (0, "")
    assert "retention: 7 days (the project's own)" in out
    code, out, err = await cli("history", "prune", "--dry-run")
    assert (code, err) == (0, "")
    assert "would delete 2 runs, 2 messages, 2 tool calls, 2 events" in out
    assert await surviving(pool, old) == set(old)
    code, out, err = await cli("history", "prune")
    assert (code, err) == (0, "")
    assert "deleted 2 runs" in out
    assert await surviving(pool, old) == set()
    code, out, err = await cli("history", "retention", "--days", "-3")
    assert code != 0
    assert "keep_days" in err
    code, out, _ = await cli("history", "retention", "--default")
    assert "retention: forever (the deployment's)" in out
