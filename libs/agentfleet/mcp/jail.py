"""Launcher of stdio MCP servers: ``python -I -m agentfleet.mcp.jail -- COMMAND [ARGS...]``.

The toolpool starts every stdio server through this module, which, in the child process
and before anything of the server runs:

1. closes every file descriptor above 2 (only stdin, stdout and stderr are inherited, even
   if a descriptor of the toolpool lacked close-on-exec);
2. sets ``PR_SET_NO_NEW_PRIVS`` (no set-uid or file-capability program gives privileges);
3. empties every capability set, bounding and ambient included, so that a root toolpool's
   child holds no capability (:func:`agentfleet.process.hardening.drop_all_capabilities`): it cannot
   read the non-dumpable platform processes (that needs ``CAP_SYS_PTRACE``) nor bypass file
   permissions;
4. replaces itself with ``COMMAND`` (``execvp``: same pid, so the toolpool's process-group
   kill still reaches the server).

The uid is not changed: the checkout may sit in a folder only its owner can enter, and the
server must still be able to run the venv's interpreter. The environment is the one the
toolpool built (the MCP SDK's minimal variables plus the server's own ``env``); ``-I`` keeps
``PYTHON*`` variables and the working directory out of this launcher's own imports.

Exit codes when the server never starts: 126 a hardening step failed (refusing to run the
server without it), 127 the command was not found or could not be executed, 2 bad usage.
"""

from __future__ import annotations

import os
import sys

from agentfleet.process.hardening import HardeningError, drop_all_capabilities, set_no_new_privs

LAUNCHER_MODULE = "agentfleet.mcp.jail"


def launcher_argv(command: str, args: list[str] | tuple[str, ...]) -> list[str]:
    """The argv that runs ``command args`` through this launcher on this interpreter."""
    return [sys.executable, "-I", "-m", LAUNCHER_MODULE, "--", command, *args]


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        print(f"usage: python -I -m {LAUNCHER_MODULE} -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    command, args = argv[1], argv[1:]
    os.closerange(3, _max_fd())
    if sys.platform.startswith("linux"):
        try:
            set_no_new_privs()
            drop_all_capabilities()
        except (HardeningError, OSError) as exc:
            print(f"mcp launcher: not starting {command!r}: {exc}", file=sys.stderr)
            return 126
    try:
        os.execvp(command, args)
    except OSError as exc:
        print(f"mcp launcher: cannot run {command!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    return 127  # execvp only returns by raising


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 65536


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
