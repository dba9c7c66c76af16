"""The dispatcher's control data in the knowledge graph: the object and relationship types
only the dispatcher's own RPCs and ``create_subtasks`` may write.

Agents reach the graph through the generic built-in tools (create_entity, update_entity,
delete_entity, create_relationship, delete_relationship). Were those allowed to write a
SpecTask, a TaskGraph, a Session or a ``blocks`` edge, a model could queue work for any
agent of the project, outside every limit its own definition sets. So they refuse these
types, and this module is the one list of them.
"""

from __future__ import annotations

SPEC_TASK = "SpecTask"
"""Object type of a dispatchable task."""
TASK_GRAPH = "TaskGraph"
"""Object type of a task graph (groups SpecTasks through their ``graph_id``)."""
SESSION = "Session"
"""Object type of one attempt of a task (agent chosen, run, outcome)."""
SESSION_MESSAGE = "SessionMessage"
"""Object type of one message of a session's conversation (copied from the run at its end)."""
DISCUSSION = "Discussion"
"""Object type of a discussion between agents on a task (``open_discussion``)."""
DISCUSSION_ENTRY = "DiscussionEntry"
"""Object type of one contribution to a discussion (``join_discussion``)."""
TASK_GRAPH_ADDITION = "TaskGraphAddition"
"""Marker object of an AddTasks request_id (idempotency)."""
BLOCKS = "blocks"
"""Relationship type ``blocker -> blocked``: the blocked task waits for the blocker."""
HAS_SESSION = "has_session"
"""Relationship type task -> session."""
FOLLOWS_UP = "follows_up"
"""Relationship type session -> the previous attempt's session."""
INFORMED_BY = "informed_by"
"""Relationship type session -> a blocker's session whose output went into its prompt."""
HAS_MESSAGE = "has_message"
"""Relationship type session -> session message, with its ``sequence`` (1-based)."""
HAS_DISCUSSION = "has_discussion"
"""Relationship type task -> discussion."""
HAS_ENTRY = "has_entry"
"""Relationship type discussion -> discussion entry, with its ``sequence`` (1-based)."""

# Conversations and discussions are records of who said what: written only by the
# dispatcher (messages) and the discussion tools (which name the author themselves).
RESERVED_OBJECT_TYPES = frozenset(
    {
        SPEC_TASK,
        TASK_GRAPH,
        SESSION,
        TASK_GRAPH_ADDITION,
        SESSION_MESSAGE,
        DISCUSSION,
        DISCUSSION_ENTRY,
    }
)
RESERVED_RELATIONSHIP_TYPES = frozenset(
    {BLOCKS, HAS_SESSION, FOLLOWS_UP, INFORMED_BY, HAS_MESSAGE, HAS_DISCUSSION, HAS_ENTRY}
)


def reserved_object_refusal(object_type: str, action: str) -> str | None:
    """Why the generic tools may not ``action`` (create, update, delete) an object of
    ``object_type``; ``None`` when they may."""
    if object_type not in RESERVED_OBJECT_TYPES:
        return None
    hint = "; use create_subtasks to add tasks" if object_type == SPEC_TASK else ""
    return (
        f"type {object_type!r} is reserved for the dispatcher: entities of this type cannot "
        f"be {action}d with the graph tools{hint}"
    )


def reserved_relationship_refusal(relationship_type: str, action: str) -> str | None:
    """Why the generic tools may not ``action`` a relationship of ``relationship_type``."""
    if relationship_type not in RESERVED_RELATIONSHIP_TYPES:
        return None
    hint = (
        "; use create_subtasks (blocked_by, blocks) to order tasks"
        if relationship_type == BLOCKS
        else ""
    )
    return (
        f"relationship type {relationship_type!r} is reserved for the dispatcher: it cannot "
        f"be {action}d with the graph tools{hint}"
    )
