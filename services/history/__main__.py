"""``python -m services.history``"""

from agentfleet.process.service_runtime import run_service
from services.history.server import build

run_service("history", build)
