"""``python -m services.executor``"""

from agentfleet.process.service_runtime import run_service
from services.executor.server import build

run_service("executor", build)
