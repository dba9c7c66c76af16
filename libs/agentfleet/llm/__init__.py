"""The model client the executor uses: a Protocol, the google-genai adapter, typed errors,
and exact ``types.Content`` <-> JSON conversion for persisted conversations."""

from agentfleet.llm.client import (
    DeltaSink,
    ModelClient,
    ModelReply,
    ModelRequest,
    RetryPolicy,
    StreamingModelClient,
    TextDelta,
    TokenUsage,
)
from agentfleet.llm.contents import (
    content_from_json,
    content_to_json,
    contents_from_json,
    contents_to_json,
)
from agentfleet.llm.errors import (
    MalformedModelReply,
    ModelError,
    ModelRequestError,
    TransientModelError,
)
from agentfleet.llm.genai_client import (
    PLACEHOLDER_API_KEY,
    GenaiModelClient,
    build_genai_client,
)
from agentfleet.llm.limiter.quota_wait import QuotaScope, QuotaWait, QuotaWaitSink

__all__ = [
    "PLACEHOLDER_API_KEY",
    "DeltaSink",
    "GenaiModelClient",
    "MalformedModelReply",
    "ModelClient",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "ModelRequestError",
    "QuotaScope",
    "QuotaWait",
    "QuotaWaitSink",
    "RetryPolicy",
    "StreamingModelClient",
    "TextDelta",
    "TokenUsage",
    "TransientModelError",
    "build_genai_client",
    "content_from_json",
    "content_to_json",
    "contents_from_json",
    "contents_to_json",
]
