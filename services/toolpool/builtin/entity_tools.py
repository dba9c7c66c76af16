"""Built-in tools over graph objects ("entities"): create, get, update, delete, list.

The dispatcher's types (``agentfleet.graph.reserved``) can be read but never written here:
tasks come from create_subtasks, which applies the calling agent's limits."""

from __future__ import annotations

from typing import Any

from agentfleet.graph import reserved_object_refusal
from services.toolpool.builtin.base import ToolContext, ToolError, builtin_tool, given, refuse
from services.toolpool.builtin.schema_parts import (
    ENTITY_ID,
    MAX_NAME,
    array,
    limit,
    property_bag,
    string,
    version,
)

__all__ = ["ENTITY_TOOLS"]

ENTITY_TYPE = string("Entity type, e.g. Document, Person.", max_length=MAX_NAME)


async def _refuse_reserved(ctx: ToolContext, object_id: str, action: str) -> None:
    """ToolError when the object is of a reserved type (a type never changes, so the check
    before the write holds for the write)."""
    stored = await ctx.repository.get_object(ctx.project_id, object_id)
    refuse(reserved_object_refusal(stored.type, action))


@builtin_tool(
    {
        "type": ENTITY_TYPE,
        "key": string("Optional natural key, unique among entities of this type.", max_length=200),
        "properties": property_bag("The entity's properties."),
    },
    required=("type",),
)
async def create_entity(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Creates an entity (a typed object with properties) in the knowledge graph and returns
    it with its id and version."""
    refuse(reserved_object_refusal(args["type"], "create"))
    entity = await ctx.repository.create_object(
        ctx.project_id,
        type=args["type"],
        key=args.get("key"),
        properties=args.get("properties", {}),
    )
    return {"entity": entity.to_json()}


@builtin_tool({"id": ENTITY_ID}, required=("id",))
async def get_entity(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Returns one entity by id, with its properties and current version."""
    entity = await ctx.repository.get_object(ctx.project_id, args["id"])
    return {"entity": entity.to_json()}


@builtin_tool(
    {
        "id": ENTITY_ID,
        "expected_version": version("Version you last read (get_entity)."),
        "properties": property_bag("Properties to set."),
        "remove_properties": array(
            "Property names to delete.", string("Property name."), max_items=100
        ),
    },
    required=("id", "expected_version"),
)
async def update_entity(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Changes an entity's properties: given keys are set, others kept, remove_properties
    deleted. Fails if the entity changed since the version you read; then get it again and
    retry."""
    changes = args.get("properties", {})
    removals = args.get("remove_properties", [])
    if not changes and not removals:
        raise ToolError("invalid arguments: properties: give properties or remove_properties")
    await _refuse_reserved(ctx, args["id"], "update")
    entity = await ctx.repository.update_object(
        ctx.project_id,
        args["id"],
        set_properties=changes,
        unset_properties=removals,
        expected_version=args["expected_version"],
    )
    return {"entity": entity.to_json()}


@builtin_tool(
    {"id": ENTITY_ID, "expected_version": version("Only delete if still at this version.")},
    required=("id",),
)
async def delete_entity(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Deletes an entity and all its relationships."""
    await _refuse_reserved(ctx, args["id"], "delete")
    await ctx.repository.delete_object(
        ctx.project_id, args["id"], expected_version=args.get("expected_version")
    )
    return {"deleted": args["id"]}


@builtin_tool(
    {
        "type": ENTITY_TYPE,
        "filters": property_bag("Property values the entities must have (equality)."),
        "cursor": string("next_cursor of the previous page.", max_length=500),
        "limit": limit(50, 200),
    }
)
async def list_entities(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """Lists entities oldest first, optionally of one type and with property values equal
    to filters. Pass next_cursor back as cursor for the next page."""
    page = await ctx.repository.list_objects(
        ctx.project_id, **given(args, "type", "filters", "cursor", "limit")
    )
    return {
        "entities": [entity.to_json() for entity in page.objects],
        "next_cursor": page.next_cursor,
    }


ENTITY_TOOLS = [create_entity, get_entity, update_entity, delete_entity, list_entities]
