"""How a command fails: one line on stderr, ``agentfleet: <CODE>: <message>``, never a traceback.

The codes are the canonical gRPC ones, so a failure reads the same whether it came from a
service or from the command itself: INVALID_ARGUMENT for a bad command line or setting,
FAILED_PRECONDITION for a database without the schema, UNAVAILABLE for PostgreSQL that did
not start, INTERNAL (with the error's type) for a bug.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from agentfleet.config import ConfigError
from agentfleet.errors import AgentFleetError

USAGE_EXIT = 2
"""Exit status of a bad command line or setting (argparse's)."""
FAILURE_EXIT = 1


class OneLineArgumentParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (argparse prints the usage first);
    its sub-command parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        fail("INVALID_ARGUMENT", f"{message} (see {self.prog} --help)", exit_code=USAGE_EXIT)


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined with " | ", blank ones dropped."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def fail(code: str, message: str, *, exit_code: int = FAILURE_EXIT) -> NoReturn:
    """Prints ``agentfleet: <code>: <message>`` on one line and exits."""
    print(f"agentfleet: {code}: {one_line(message)}", file=sys.stderr)
    raise SystemExit(exit_code)


def fail_for(exc: BaseException) -> NoReturn:
    """The line and exit status for an error that ended a command."""
    if isinstance(exc, ConfigError):
        fail("INVALID_ARGUMENT", f"configuration error: {exc}", exit_code=USAGE_EXIT)
    if isinstance(exc, AgentFleetError):
        fail(exc.code.name, exc.message)
    if isinstance(exc, OSError):
        # A file or socket the command needed (a manifest, a log folder, ...).
        fail("UNAVAILABLE", str(exc) or type(exc).__name__)
    # A bug: still one line, with the type so it can be reported.
    fail("INTERNAL", f"unexpected {type(exc).__name__}: {exc}")
