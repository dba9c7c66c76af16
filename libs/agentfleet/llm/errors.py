"""Errors of a model call, after our retry policy has run its course.

Hierarchy::

    ModelError                 root; status_code and the server's message when there was one
    ├── TransientModelError    429 / 500 / 502 / 503 / 504 or a dropped connection, retries spent
    │   └── QuotaWaitTooLong   the expected quota wait passes the bound (a fallback is due)
    ├── QuotaWaitExceeded      waited the maximum for the model's quota (names model and limit)
    ├── ModelRequestError      any other 4xx: the request itself is wrong (bad key, bad schema)
    └── MalformedModelReply    a 200 whose body is not JSON or holds no candidate

google-genai and transport errors are translated into these in one place,
:func:`agentfleet.llm.genai_translate.translate_error`.
"""

from __future__ import annotations

import grpc

from agentfleet.errors import AgentFleetError


class ModelError(AgentFleetError):
    """A model call failed. ``message`` is the server's message (or ours when it sent none)."""

    def __init__(self, message: str, *, status_code: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status_code = status_code
        """HTTP status of the last answer; None when no answer arrived."""
        self.attempts = attempts
        """How many calls were made, retries included."""

    def __str__(self) -> str:
        status = f"{self.status_code} " if self.status_code is not None else ""
        return f"{status}{self.message}"


class TransientModelError(ModelError, code=grpc.StatusCode.UNAVAILABLE):
    """The model was unavailable or rate limited on every attempt."""


class QuotaWaitExceeded(ModelError, code=grpc.StatusCode.RESOURCE_EXHAUSTED):
    """A call waited for its model's shared quota as long as allowed, or the quota frees
    later than that (requests per day); the message names the model and the limit."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status_code=429, attempts=0)


class QuotaWaitTooLong(TransientModelError):
    """The model's expected quota wait passes the caller's bound: raised instead of waiting
    when the call has a fallback model to go to (``expected_wait_s`` says how long)."""

    def __init__(self, message: str, *, expected_wait_s: float) -> None:
        super().__init__(message, status_code=429)
        self.expected_wait_s = expected_wait_s


class ModelRequestError(ModelError, code=grpc.StatusCode.FAILED_PRECONDITION):
    """The model refused the request (4xx other than 429); retrying will not help."""


class MalformedModelReply(ModelError):
    """The model answered 200 with a body we cannot use: not JSON, or no candidates."""
