"""The knowledge graph: objects and relationships of ``kb.graph_*``, shared by the toolpool's
built-in tools and the dispatcher's task DAGs."""

from agentfleet.graph._common import OBJECT_COLUMNS, parse_id
from agentfleet.graph.dag import find_cycle
from agentfleet.graph.models import (
    Direction,
    GraphObject,
    ObjectPage,
    Related,
    Relationship,
    ScoredObject,
    Traversal,
    TraversalNode,
)
from agentfleet.graph.reads import MAX_TRAVERSAL_DEPTH, MAX_TRAVERSAL_NODES, RRF_K
from agentfleet.graph.repository import GraphRepository, NewObject
from agentfleet.graph.reserved import (
    BLOCKS,
    FOLLOWS_UP,
    HAS_SESSION,
    INFORMED_BY,
    RESERVED_OBJECT_TYPES,
    RESERVED_RELATIONSHIP_TYPES,
    SESSION,
    SPEC_TASK,
    TASK_GRAPH,
    TASK_GRAPH_ADDITION,
    reserved_object_refusal,
    reserved_relationship_refusal,
)
from agentfleet.graph.tasks import (
    TASK_CHANGES_CHANNEL,
    TASKS_ADDED_CHANNEL,
    blocks_edges,
    cycle_with_new_edges,
    graph_of_run,
    lock_task_dag,
    notify_task_changes,
    notify_tasks_added,
    task_keys_taken,
)

__all__ = [
    "BLOCKS",
    "FOLLOWS_UP",
    "HAS_SESSION",
    "INFORMED_BY",
    "MAX_TRAVERSAL_DEPTH",
    "MAX_TRAVERSAL_NODES",
    "OBJECT_COLUMNS",
    "RESERVED_OBJECT_TYPES",
    "RESERVED_RELATIONSHIP_TYPES",
    "RRF_K",
    "SESSION",
    "SPEC_TASK",
    "TASKS_ADDED_CHANNEL",
    "TASK_CHANGES_CHANNEL",
    "TASK_GRAPH",
    "TASK_GRAPH_ADDITION",
    "Direction",
    "GraphObject",
    "GraphRepository",
    "NewObject",
    "ObjectPage",
    "Related",
    "Relationship",
    "ScoredObject",
    "Traversal",
    "TraversalNode",
    "blocks_edges",
    "cycle_with_new_edges",
    "find_cycle",
    "graph_of_run",
    "lock_task_dag",
    "notify_task_changes",
    "notify_tasks_added",
    "parse_id",
    "reserved_object_refusal",
    "reserved_relationship_refusal",
    "task_keys_taken",
]
