"""``python -m services.toolpool``"""

from agentfleet.process.service_runtime import run_service
from services.toolpool.server import build

# It starts stdio MCP servers: asyncio's loop (see run_service).
run_service("toolpool", build, starts_processes=True)
