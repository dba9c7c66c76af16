"""Gemini REST wire format: the JSON the stub sends for a :class:`Reply`.

Shapes follow what google-genai 3.x parses (``models._GenerateContentResponse_from_mldev``,
``errors.APIError``): camelCase fields, ``usageMetadata`` with prompt/candidates/total token
counts, and errors as ``{"error": {"code", "message", "status"}}``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agentfleet.gemini_stub.request import StubRequest
from agentfleet.gemini_stub.script import Reply

# The google.rpc canonical status the real API puts next to each HTTP status.
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

MALFORMED_BODY = '{"candidates": [{"content": {"role": "model", "parts": [{"text": "cut'
"""What a ``malformed`` reply sends: JSON cut off mid-string."""


def status_name(code: int) -> str:
    """The canonical status string for an HTTP status code."""
    return _STATUS_NAMES.get(code, "INTERNAL" if code >= 500 else "FAILED_PRECONDITION")


def error_body(code: int, message: str) -> dict[str, Any]:
    """A Google API error body."""
    return {"error": {"code": code, "message": message, "status": status_name(code)}}


def reply_error_body(reply: Reply) -> dict[str, Any]:
    assert reply.error_status is not None
    message = reply.error_message or f"scripted {reply.error_status} from the gemini stub"
    body = error_body(reply.error_status, message)
    details: list[dict[str, Any]] = []
    if reply.quota_id is not None:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{"quotaId": reply.quota_id}],
            }
        )
    if reply.retry_delay_s is not None:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{reply.retry_delay_s:.3f}s",
            }
        )
    if details:
        body["error"]["details"] = details
    return body


def _parts(
    reply: Reply, text: str | None, with_calls: bool, *, thought: bool = False
) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if thought and text is not None:
        parts.append({"text": text, "thought": True})
    elif text is not None:
        parts.append({"text": text})
    if with_calls:
        for call in reply.calls:
            function_call: dict[str, Any] = {"name": call.name, "args": dict(call.args)}
            if call.id is not None:
                function_call["id"] = call.id
            parts.append({"functionCall": function_call})
    return parts


def _tokens(characters: int) -> int:
    return max(1, math.ceil(characters / 4))


def usage_metadata(reply: Reply, request: StubRequest) -> dict[str, int]:
    """``reply.usage`` if set, else about one token per four characters of each side (the
    request as received when its size is known)."""
    if reply.usage is not None:
        prompt, candidates = reply.usage.prompt_tokens, reply.usage.candidates_tokens
        total = reply.usage.total_tokens
    else:
        if request.body_chars is not None:
            prompt = _tokens(request.body_chars)
        else:
            asked = {k: request.body.get(k) for k in ("systemInstruction", "contents", "tools")}
            prompt = _tokens(len(json.dumps(asked, separators=(",", ":"))))
        answered = json.dumps(_parts(reply, reply.text, with_calls=True), separators=(",", ":"))
        candidates = _tokens(len(answered)) if reply.text or reply.calls else 0
        total = None
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates if total is None else total,
    }


def _envelope(request: StubRequest, response_id: str) -> dict[str, Any]:
    return {"modelVersion": request.model, "responseId": response_id}


def _candidate(parts: list[dict[str, Any]], finish_reason: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish_reason is not None:
        candidate["finishReason"] = finish_reason
    return candidate


def empty_response(reply: Reply, request: StubRequest, response_id: str) -> dict[str, Any]:
    """No candidates, as for a blocked prompt."""
    body: dict[str, Any] = {"usageMetadata": usage_metadata(reply, request)}
    if reply.block_reason is not None:
        body["promptFeedback"] = {"blockReason": reply.block_reason}
    return body | _envelope(request, response_id)


def generate_response(reply: Reply, request: StubRequest, response_id: str) -> dict[str, Any]:
    """The body of a ``generateContent`` answer."""
    if reply.empty:
        return empty_response(reply, request, response_id)
    parts = _parts(reply, reply.thought, False, thought=True) + _parts(reply, reply.text, True)
    return {
        "candidates": [_candidate(parts, reply.finish_reason)],
        "usageMetadata": usage_metadata(reply, request),
    } | _envelope(request, response_id)


def stream_responses(reply: Reply, request: StubRequest, response_id: str) -> list[dict[str, Any]]:
    """The chunks of a ``streamGenerateContent`` answer: the thought, then the text, in
    pieces, then the calls, finish reason and usage in the last chunk (as the real API
    streams them)."""
    if reply.empty:
        return [empty_response(reply, request, response_id)]
    size = reply.stream_chunk_chars
    pieces = [(p, True) for p in _split(reply.thought, size)]
    pieces += [(p, False) for p in _split(reply.text, size)]
    chunks = [
        {"candidates": [_candidate(_parts(reply, piece, False, thought=thought), None)]}
        | _envelope(request, response_id)
        for piece, thought in pieces[:-1]
    ]
    last, last_thought = pieces[-1] if pieces else (None, False)
    chunks.append(
        {
            "candidates": [
                _candidate(_parts(reply, last, True, thought=last_thought), reply.finish_reason)
            ],
            "usageMetadata": usage_metadata(reply, request),
        }
        | _envelope(request, response_id)
    )
    return chunks


def _split(text: str | None, size: int | None) -> list[str]:
    if text is None:
        return []
    if not size or size <= 0 or len(text) <= size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]
