"""The parser of the remote commands (those that talk to the services over gRPC)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Awaitable, Callable, Iterator

from agentfleet.cli.approvals import add_approval_commands
from agentfleet.cli.client import Connection, add_connection_flags
from agentfleet.cli.manage.budget import add_budget_arguments
from agentfleet.cli.manage.retention import add_history_commands
from agentfleet.cli.manage.triggers import add_trigger_commands
from agentfleet.cli.render import RUN_STATUS_CHOICES

Handler = Callable[[Connection, argparse.Namespace], Awaitable[int]]


def _command(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
    help_: str,
    handler: str,
    *,
    json_flag: bool = True,
    group: bool = False,
) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_, description=help_)
    parser.set_defaults(remote=handler)
    # A group (mcp, secret, dag) takes its flags on each action, after the action's name.
    if not group:
        _leaf_flags(parser, json_flag=json_flag)
    return parser


def _leaf_flags(parser: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    if json_flag:
        parser.add_argument("--json", action="store_true", help="print JSON (lines) instead")
    add_connection_flags(parser)


@contextlib.contextmanager
def _group(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
    help_: str,
    handler: str,
) -> Iterator[argparse._SubParsersAction]:  # type: ignore[type-arg]
    """A command of actions (``mcp add``): yields the actions to add, then gives each the
    leaf flags; the handler finds the action in ``args.<name>_command``."""
    parser = _command(commands, name, help_, handler, group=True)
    actions = parser.add_subparsers(
        dest=f"{name.replace('-', '_')}_command", required=True, metavar="ACTION"
    )
    yield actions
    for sub in actions.choices.values():
        _leaf_flags(sub)


def _paging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=50, help="page size (default 50)")
    parser.add_argument("--page-token", help="continue a listing where the last page ended")


INTERNAL_HELP = "also show the platform's own plumbing (internal events and messages)"


def add_remote_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Adds run, runs, show, tree, cancel, resume, install, agents, mcp, secret, dag,
    approvals, approve and reject."""
    run = _command(commands, "run", "run an agent and watch its run tree live", "run:run_agent")
    run.add_argument("agent")
    run.add_argument("input")
    run.add_argument("--max-steps", type=int)
    run.add_argument("--timeout", type=float, help="seconds")
    run.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--request-id", help="idempotency key: the same id gives the same run")
    run.add_argument(
        "--max-tree-usd", help="cost limit of the whole run tree in US dollars (pauses it)"
    )
    run.add_argument("--internal", action="store_true", help=INTERNAL_HELP)

    runs = _command(commands, "runs", "list runs", "runs:list_runs")
    runs.add_argument("--agent")
    runs.add_argument("--status", action="append", default=[], choices=RUN_STATUS_CHOICES)
    runs.add_argument("--parent", metavar="RUN")
    runs.add_argument("--root", metavar="RUN")
    runs.add_argument("--top-level", action="store_true", help="only runs without a parent")
    runs.add_argument(
        "--started-by",
        choices=["rpc", "trigger", "schedule", "event", "parent", "task"],
        help="only runs started so",
    )
    _paging(runs)

    show = _command(commands, "show", "show a run, its messages or its tool calls", "runs:show_run")
    show.add_argument("run_id", metavar="RUN")
    what = show.add_mutually_exclusive_group()
    what.add_argument("--messages", action="store_true", help="list the messages")
    what.add_argument("--tool-calls", action="store_true", help="list the tool calls")
    what.add_argument("--message", metavar="ID", help="one message in full")
    what.add_argument("--tool-call", metavar="ID", help="one tool call in full")
    show.add_argument("--internal", action="store_true", help=INTERNAL_HELP)
    _paging(show)

    tree = _command(commands, "tree", "show the tree of runs under a run", "runs:show_tree")
    tree.add_argument("run_id", metavar="RUN")

    cancel = _command(
        commands, "cancel", "cancel a run and its descendants", "run:cancel_run", json_flag=False
    )
    cancel.add_argument("run_id", metavar="RUN")
    cancel.add_argument("--reason")

    resume = _command(commands, "resume", "resume a paused run and watch it", "run:resume_run")
    resume.add_argument("run_id", metavar="RUN")
    resume.add_argument("--input", help="extra input for the resumed run")
    resume.add_argument("--max-steps", type=int)
    resume.add_argument("--internal", action="store_true", help=INTERNAL_HELP)

    install = _command(
        commands,
        "install",
        "install a product manifest (YAML or JSON)",
        "manage.agents:install_product",
    )
    install.add_argument("manifest", metavar="MANIFEST")
    install.add_argument("--validate-only", action="store_true")

    agents = _command(commands, "agents", "list the project's agents", "manage.agents:list_agents")
    _paging(agents)

    with _group(commands, "mcp", "manage MCP servers", "manage.tools:mcp") as mcp:
        add = mcp.add_parser("add", help="add or update an MCP server")
        add.add_argument("name")
        add.add_argument("--command", help="stdio: the program to start")
        add.add_argument("--arg", action="append", default=[], help="stdio: one argument (repeat)")
        add.add_argument("--url", help="sse / streamable_http: the server URL")
        add.add_argument("--transport", choices=["stdio", "sse", "streamable_http"])
        add.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
        add.add_argument("--header", action="append", default=[], metavar="KEY=VALUE")
        add.add_argument("--prefix", help="tool name prefix ('' exposes raw names)")
        add.add_argument("--call-timeout", type=float, help="seconds")
        for action in ("list", "test", "remove"):
            sub = mcp.add_parser(action, help=f"{action} MCP servers")
            if action != "list":
                sub.add_argument("name")

    with _group(
        commands,
        "remote-agent",
        "manage remote A2A agents (spawned as remote children)",
        "manage.remote_agents:remote_agent",
    ) as remote:
        add = remote.add_parser("add", help="register or update a remote A2A agent")
        add.add_argument("name")
        add.add_argument("card_url", metavar="CARD_URL", help="URL of its Agent Card")
        add.add_argument(
            "--header", action="append", default=[], metavar="KEY=VALUE", help="${SECRET} ok"
        )
        add.add_argument("--description", help="shown to coordinators (default: the card's)")
        add.add_argument("--timeout", type=float, help="a child's time limit, seconds")
        remote.add_parser("list", help="list remote agents")
        remove = remote.add_parser("remove", help="remove a remote agent")
        remove.add_argument("name")

    with _group(commands, "secret", "manage project secrets", "manage.tools:secret") as secret:
        set_ = secret.add_parser("set", help="set a secret (value from --value or stdin)")
        set_.add_argument("name")
        set_.add_argument("--value", help="the value (else read from stdin, never echoed)")
        secret.add_parser("list", help="list secret names (never values)")
        remove = secret.add_parser("remove", help="remove a secret")
        remove.add_argument("name")

    with _group(
        commands, "budget", "the project's budgets and usage", "manage.budget:budget"
    ) as budget:
        budget.add_parser("show", help="budgets and usage this UTC day and month")
        add_budget_arguments(
            budget.add_parser("set", help="set the budgets (admin; a limit left out is removed)")
        )

    with _group(commands, "dag", "submit and watch task graphs", "dag:dag") as dag:
        submit = dag.add_parser("submit", help="submit a DAG file (YAML)")
        submit.add_argument("file", metavar="FILE.yaml")
        submit.add_argument("--watch", action="store_true", help="then watch it to the end")
        submit.add_argument("--validate-only", action="store_true")
        watch = dag.add_parser("watch", help="watch a task graph with a progress bar")
        watch.add_argument("graph_id", metavar="GRAPH")
    with _group(
        commands, "history", "history retention: prune, retention", "manage.retention:history"
    ) as history:
        add_history_commands(history)
    add_approval_commands(commands, _command)
    add_trigger_commands(commands, _command, _group, _paging)


def resolve_handler(spec: str) -> Handler:
    """``module:function`` under agentfleet.cli (``manage.tools:mcp``), imported only when the
    command runs."""
    import importlib

    module, _, function = spec.partition(":")
    handler: Handler = getattr(importlib.import_module(f"agentfleet.cli.{module}"), function)
    return handler
