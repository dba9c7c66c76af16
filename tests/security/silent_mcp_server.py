"""A stdio MCP server that reads every request and answers none, not even ``initialize``:
each call that needs it waits for the full connect timeout of its configuration.

Run: ``python tests/security/silent_mcp_server.py`` (stdio).
"""

import sys

for _line in sys.stdin:
    pass
