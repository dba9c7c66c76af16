"""The stdio MCP command lines the test suite runs: the harness allows these and no other.

Tests start the example test server and the demo's offline web server on this interpreter,
the research product's ``python examples/mcp/offline_web/server.py``, and the published
``mcp-server-time`` (as the venv's console script and as ``python -m mcp_server_time``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from agentfleet.mcp.stdio import format_allowlist

ROOT = Path(__file__).parents[3]
TEST_SERVER = str(ROOT / "examples" / "mcp" / "test_server" / "server.py")
OFFLINE_WEB_SERVER = str(ROOT / "examples" / "mcp" / "offline_web" / "server.py")
TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")


def _test_commands(root: Path) -> list[tuple[str, ...]]:
    return [
        (
            sys.executable,
            str(root / "examples" / "mcp" / "test_server" / "server.py"),
            "--transport",
            "stdio",
        ),
        (sys.executable, str(root / "examples" / "mcp" / "offline_web" / "server.py")),
    ]


# Tests spell the checkout's path as found or resolved (symlinks): both are allowed.
TEST_STDIO_COMMANDS: tuple[tuple[str, ...], ...] = tuple(
    dict.fromkeys(
        [
            *_test_commands(ROOT),
            *_test_commands(ROOT.resolve()),
            ("python", "examples/mcp/offline_web/server.py"),
            (TIME_SERVER,),
            ("python", "-m", "mcp_server_time"),
        ]
    )
)
TEST_STDIO_ALLOWLIST = format_allowlist(TEST_STDIO_COMMANDS)
"""``AGENTFLEET_MCP_STDIO_ALLOWLIST`` as the harness sets it."""
