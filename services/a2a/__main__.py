"""``python -m services.a2a``"""

from agentfleet.process.service_runtime import run_service
from services.a2a.server import build

run_service("a2a", build)
