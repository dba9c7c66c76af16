"""``agentfleet`` entry point: parses arguments and turns every failure into one line."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence

from agentfleet.cli.client import CliError, connection_from
from agentfleet.cli.commands import add_remote_commands, resolve_handler
from agentfleet.cli.failure import OneLineArgumentParser, fail_for, report
from agentfleet.cli.manage.secrets import add_secrets_command
from agentfleet.config import ConfigError, load_settings


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog="agentfleet", description="Run and inspect multi-agent LLM systems."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser(
        "up", help="start PostgreSQL (embedded unless DATABASE_URL), migrate, run all services"
    )
    up.add_argument(
        "--demo",
        action="store_true",
        help="install the research product and run the seed 001 research scenario",
    )
    up.add_argument(
        "--exit-when-ready",
        action="store_true",
        help="stop everything again once all services are SERVING (and the demo has run)",
    )
    up.add_argument(
        "--startup-timeout", type=float, default=60.0, help="seconds to wait for health"
    )

    migrate = commands.add_parser("migrate", help="apply or roll back database migrations")
    migrate.add_argument("action", choices=["up", "down", "status"], nargs="?", default="up")
    migrate.add_argument(
        "--target", type=int, default=None, help="version to stop at (down: default 0)"
    )

    token = commands.add_parser("token", help="manage API tokens")
    token_commands = token.add_subparsers(dest="token_command", required=True, metavar="ACTION")
    create = token_commands.add_parser("create", help="create a token and print it once")
    create.add_argument("--project", help="the project the token belongs to")
    create.add_argument("--role", choices=["admin", "member", "service"], default="member")
    create.add_argument(
        "--service",
        help="for --role service: the service presenting it (executor, dispatcher, ...)",
    )
    create.add_argument("--name", default="", help="a label to recognise the token by")
    revoke = token_commands.add_parser("revoke", help="revoke a token by its id")
    revoke.add_argument("token_id")

    add_secrets_command(commands)
    add_remote_commands(commands)
    return parser


async def run_remote(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> int:
    """Runs one remote command (run, runs, show, ...) in the running event loop.

    Every failure becomes one line on stderr, ``agentfleet: <CODE>: <message>``, and a
    non-zero return. ``environ`` replaces the process environment (for tests).
    """
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(environ)
    except ConfigError as exc:
        return report("INVALID_ARGUMENT", f"configuration error: {exc}")
    conn = connection_from(args, settings)
    try:
        return await resolve_handler(args.remote)(conn, args)
    except (CliError, BaseExceptionGroup) as exc:
        error = _first_cli_error(exc)
        return report(error.code, error.message)
    finally:
        await conn.close()


def _first_cli_error(exc: BaseException) -> CliError:
    """The error itself, or the first CliError of a task group's failures (a child run's
    watch, say); anything else is re-raised, since it is a bug to see in full."""
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        matched, _rest = exc.split(CliError)
        if matched is not None:
            return _first_cli_error(matched.exceptions[0])
    raise exc


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if getattr(args, "remote", None):
        try:
            raise SystemExit(asyncio.run(run_remote(sys.argv[1:] if argv is None else argv)))
        except KeyboardInterrupt:
            raise SystemExit(130) from None
        except Exception as exc:  # every failure ends as one line
            fail_for(exc)
    try:
        settings = load_settings()
    except ConfigError as exc:
        fail_for(exc)
    try:
        if args.command == "up":
            from agentfleet.cli.stack.up import run_up

            code = asyncio.run(
                run_up(
                    settings,
                    exit_when_ready=args.exit_when_ready,
                    demo=args.demo,
                    startup_timeout_s=args.startup_timeout,
                )
            )
        elif args.command == "migrate":
            from agentfleet.cli.manage.admin import run_migrate

            code = asyncio.run(run_migrate(settings, args.action, args.target))
        elif args.command == "secrets":
            from agentfleet.cli.manage.secrets import run_secrets

            code = asyncio.run(run_secrets(settings, args))
        else:
            from agentfleet.cli.manage.admin import run_token

            code = asyncio.run(run_token(settings, args))
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # every failure ends as one line, never a traceback
        fail_for(exc)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
