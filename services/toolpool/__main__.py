"""``python -m services.toolpool``"""

from agentfleet.service_runtime import run_service
from services.toolpool.server import build

run_service("toolpool", build)
