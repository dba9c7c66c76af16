"""The knowledge graph: objects and relationships of ``kb.graph_*``, shared by the toolpool's
built-in tools and the dispatcher's task DAGs."""

from agentfleet.graph._common import parse_id
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
from agentfleet.graph.tasks import (
    BLOCKS,
    SPEC_TASK,
    TASKS_ADDED_CHANNEL,
    blocks_edges,
    cycle_with_new_edges,
    graph_of_run,
    lock_task_dag,
    notify_tasks_added,
    task_keys_taken,
)

__all__ = [
    "BLOCKS",
    "MAX_TRAVERSAL_DEPTH",
    "MAX_TRAVERSAL_NODES",
    "RRF_K",
    "SPEC_TASK",
    "TASKS_ADDED_CHANNEL",
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
    "notify_tasks_added",
    "parse_id",
    "task_keys_taken",
]
