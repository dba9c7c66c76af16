"""Threads (issue #19): runs that continue one conversation.

A run started with a ``thread_id`` begins from the conversation of the thread's previous
*completed* run (the newest one queued before it): its messages, cut to the last
``max_turns`` turns, come before the new input. A turn starts at a user message (the run
input, or a note the executor added) and holds everything up to the next one, so a cut
never separates a function call from its response. Cut, not summarised: what the model
sees is exactly what was said. The definition sets the policy in ``config.thread``::

    {"max_turns": 10}      # 1 to 100; default 10

Since every run stores the context it started from, the thread's conversation carries on
from run to run within that bound. Runs of one thread never execute at once: the claim
(:mod:`store.claim_sql`) leaves a thread's run queued while an older one is queued, running or
waiting. Threads are scoped to the project: the same thread_id in another project is
another thread.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
from google.genai import types

from agentfleet.errors import InvalidArgument
from agentfleet.llm import content_from_json
from services.executor.runs import RunRecord
from services.executor.store import messages, run_reads

DEFAULT_MAX_TURNS = 10
MAX_TURNS_LIMIT = 100
THREAD_ID_PATTERN = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
"""What a thread_id may be (letters, digits, . _ : -; up to 128 characters)."""

Message = tuple[str, types.Content]
"""(role as stored: user, model or tool; content)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ThreadPolicy:
    """How much of the thread a run starts from."""

    max_turns: int = DEFAULT_MAX_TURNS


def parse_thread_policy(config: Mapping[str, Any]) -> ThreadPolicy:
    """The ``thread`` entry of a definition's config; InvalidArgument naming the field."""
    raw = config.get("thread")
    if raw is None:
        return ThreadPolicy()
    if not isinstance(raw, Mapping):
        raise InvalidArgument.for_field("config.thread", "must be an object")
    turns = raw.get("max_turns", DEFAULT_MAX_TURNS)
    if isinstance(turns, bool) or not isinstance(turns, int) or not 1 <= turns <= MAX_TURNS_LIMIT:
        raise InvalidArgument.for_field(
            "config.thread.max_turns", f"must be an integer from 1 to {MAX_TURNS_LIMIT}"
        )
    return ThreadPolicy(max_turns=turns)


def last_turns(messages: Sequence[Message], max_turns: int) -> list[Message]:
    """The messages of the last ``max_turns`` turns (a turn starts at a ``user`` message;
    anything before the first one is dropped with the oldest turn)."""
    starts = [i for i, (role, _content) in enumerate(messages) if role == "user"]
    if not starts:
        return []
    first = starts[max(0, len(starts) - max_turns)]
    return list(messages[first:])


async def thread_history(pool: asyncpg.Pool, run: RunRecord, policy: ThreadPolicy) -> list[Message]:
    """The context a thread's run starts from (empty for a run not in a thread, or the
    thread's first)."""
    if run.thread_id is None:
        return []
    async with pool.acquire() as conn:
        previous = await run_reads.previous_in_thread(conn, run)
        if previous is None:
            return []
        rows = await messages.conversation(conn, run.project_id, previous)
    return last_turns(
        [(row.role, content_from_json(row.content)) for row in rows], policy.max_turns
    )
