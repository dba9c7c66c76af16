"""How a command fails: one line on stderr, ``agentfleet: <CODE>: <message>``, never a traceback.

The codes are the canonical gRPC ones, so a failure reads the same whether it came from a
service or from the command itself: INVALID_ARGUMENT for a bad command line, setting, file
or field (exit 2), FAILED_PRECONDITION for a database without the schema, UNAVAILABLE for
PostgreSQL that did not start, INTERNAL (with the error's type) for a bug (these exit 1).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from agentfleet.cli.render import inert
from agentfleet.config import ConfigError
from agentfleet.errors import AgentFleetError

USAGE_EXIT = 2
"""Exit status of INVALID_ARGUMENT: a bad command line, setting, file or field (argparse's)."""
FAILURE_EXIT = 1
"""Exit status of every other failure."""


def exit_code_for(code: str) -> int:
    """The exit status of a failure with this canonical code: the one rule every command
    follows, so a script can tell "fix your input" (2) from "it did not work" (1)."""
    return USAGE_EXIT if code == "INVALID_ARGUMENT" else FAILURE_EXIT


class OneLineArgumentParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (argparse prints the usage first);
    its sub-command parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        fail("INVALID_ARGUMENT", f"{message} (see {self.prog} --help)")


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined with " | ", blank ones dropped."""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


def report(code: str, message: str) -> int:
    """Prints ``agentfleet: <code>: <message>`` on one line; returns the exit status."""
    # The message may quote a tenant's or a model's text (a name, an error): made inert.
    print(inert(f"agentfleet: {code}: {one_line(message)}"), file=sys.stderr)
    return exit_code_for(code)


def fail(code: str, message: str) -> NoReturn:
    """Prints ``agentfleet: <code>: <message>`` on one line and exits."""
    raise SystemExit(report(code, message))


def fail_for(exc: BaseException) -> NoReturn:
    """The line and exit status for an error that ended a command."""
    if isinstance(exc, ConfigError):
        fail("INVALID_ARGUMENT", f"configuration error: {exc}")
    if isinstance(exc, AgentFleetError):
        fail(exc.code.name, exc.message)
    if isinstance(exc, OSError):
        # A file or socket the command needed (a manifest, a log folder, ...).
        fail("UNAVAILABLE", str(exc) or type(exc).__name__)
    # A bug: still one line, with the type so it can be reported.
    fail("INTERNAL", f"unexpected {type(exc).__name__}: {exc}")
