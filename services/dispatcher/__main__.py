"""``python -m services.dispatcher``"""

from agentfleet.process.service_runtime import run_service
from services.dispatcher.server import build

run_service("dispatcher", build)
