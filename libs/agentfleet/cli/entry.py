"""The container image's entrypoint: ``IMAGE <executor|toolpool|dispatcher|history> ...`` runs
a service, ``IMAGE migrate ...`` applies migrations, ``IMAGE cli ...`` (or any other
``agentfleet`` command) runs the CLI.

The chosen program replaces this process (``exec``), so it is PID 1's direct image and gets
SIGTERM from the kubelet itself, which is what lets a service drain on shutdown.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from agentfleet.config import SERVICE_NAMES

USAGE = (
    "usage: IMAGE {executor|toolpool|dispatcher|history|a2a|console|migrate|cli} [ARGS...]\n"
    "  executor|toolpool|dispatcher|history|a2a  run that service\n"
    "  console                               run the web console (port 8080)\n"
    "  migrate [up|down|status]              apply or roll back database migrations\n"
    "  cli COMMAND ...                       any agentfleet command (cli may be left out)"
)


def plan(argv: Sequence[str]) -> list[str]:
    """The command line to exec for the container's arguments ``argv``."""
    python = sys.executable
    if not argv or argv[0] in ("-h", "--help", "help"):
        return [python, "-c", f"print({USAGE!r})"]
    first, rest = argv[0], list(argv[1:])
    if first in SERVICE_NAMES or first == "console":
        return [python, "-m", f"services.{first}", *rest]
    if first == "cli":
        return [python, "-m", "agentfleet.cli.main", *rest]
    # migrate, up, token, run, runs, ...: the agentfleet command of that name.
    return [python, "-m", "agentfleet.cli.main", first, *rest]


def main() -> None:
    command = plan(sys.argv[1:])
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
