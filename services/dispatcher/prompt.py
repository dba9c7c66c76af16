"""The agent's input for one attempt of a task (DESIGN §9 "Prompt"). Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["BlockerResult", "build_prompt"]

MAX_SUMMARY_CHARS = 4_000
"""Each blocker summary is cut to this: dependents get the gist, not whole transcripts."""
MAX_ERROR_CHARS = 2_000


@dataclass(frozen=True, kw_only=True, slots=True)
class BlockerResult:
    """A completed blocker whose summary goes into the prompt (its session informs this one)."""

    key: str
    title: str
    summary: str
    session_id: str | None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " [...]"


def build_prompt(
    *,
    title: str,
    description: str,
    context: Mapping[str, Any] | None = None,
    blockers: Sequence[BlockerResult] = (),
    previous_error: str | None = None,
    feedback: str | None = None,
) -> str:
    """Title, description, extra context, completed blockers' summaries, and on a retry
    the previous attempt's error and any feedback."""
    parts = [f"# Task: {title.strip()}"]
    if description.strip():
        parts.append(description.strip())
    if context:
        parts.append("## Context\n" + json.dumps(dict(context), indent=2, sort_keys=True))
    if blockers:
        lines = ["## Results of the tasks this one depends on"]
        for blocker in blockers:
            summary = _cut(blocker.summary.strip(), MAX_SUMMARY_CHARS) or "(no summary)"
            lines.append(f"### {blocker.key}: {blocker.title}\n{summary}")
        parts.append("\n\n".join(lines))
    if previous_error:
        parts.append(
            "## Previous attempt failed\nThe previous attempt of this task failed with: "
            f"{_cut(previous_error.strip(), MAX_ERROR_CHARS)}\nAvoid repeating that mistake."
        )
    if feedback:
        parts.append(f"## Feedback\n{feedback.strip()}")
    return "\n\n".join(parts)
