"""Which failures of a run's execution are an outage of what it depends on -- PostgreSQL
restarting or failing over, the toolpool unreachable -- rather than a failure of the run.

Such an execution is not recorded ``failed``: its worker runs it again from what it had
recorded once the dependency is back (:class:`services.executor.worker.RunWorker`).
"""

from __future__ import annotations

import grpc

from agentfleet.reconnect import is_disconnect


def is_outage(exc: BaseException) -> bool:
    """True when ``exc`` (or the error it was raised from) says the database went away or a
    service answered UNAVAILABLE (the toolpool restarting, or its own database away)."""
    for error in (exc, exc.__cause__):
        if error is None:
            continue
        if is_disconnect(error):
            return True
        if isinstance(error, grpc.aio.AioRpcError) and error.code() is grpc.StatusCode.UNAVAILABLE:
            return True
    return False
