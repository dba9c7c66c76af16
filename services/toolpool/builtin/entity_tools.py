"""Built-in tools over graph objects ("entities"): create, get, update, delete, list.

The dispatcher's types (``agentfleet.graph.reserved``) can be read but never written here:
tasks come from create_subtasks, which applies the calling agent's limits."""

from __future__ import annotations

from typing import Any

from agentfleet.graph import reserved_object_refusal
from services.toolpool.builtin.base import BuiltinTool, ToolContext, ToolError
from services.toolpool.builtin.schema_parts import (
    MAX_NAME,
    array,
    integer,
    limit,
    obj,
    object_id,
    property_bag,
    string,
)

__all__ = ["ENTITY_TOOLS"]

ENTITY_TYPE = string("Entity type, e.g. Document, Person.", max_length=MAX_NAME)
VERSION = integer("Version you last read (get_entity).", minimum=1, maximum=2**31 - 1)


async def _refuse_reserved(ctx: ToolContext, object_id: str, action: str) -> None:
    """ToolError when the object is of a reserved type (a type never changes, so the check
    before the write holds for the write)."""
    stored = await ctx.repository.get_object(ctx.project_id, object_id)
    refusal = reserved_object_refusal(stored.type, action)
    if refusal is not None:
        raise ToolError(refusal)


async def create_entity(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    refusal = reserved_object_refusal(args["type"], "create")
    if refusal is not None:
        raise ToolError(refusal)
    entity = await ctx.repository.create_object(
        ctx.project_id,
        type=args["type"],
        key=args.get("key"),
        properties=args.get("properties", {}),
    )
    return {"entity": entity.to_json()}


async def get_entity(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    entity = await ctx.repository.get_object(ctx.project_id, args["id"])
    return {"entity": entity.to_json()}


async def update_entity(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
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


async def delete_entity(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    await _refuse_reserved(ctx, args["id"], "delete")
    await ctx.repository.delete_object(
        ctx.project_id, args["id"], expected_version=args.get("expected_version")
    )
    return {"deleted": args["id"]}


async def list_entities(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    page = await ctx.repository.list_objects(
        ctx.project_id,
        type=args.get("type"),
        filters=args.get("filters"),
        cursor=args.get("cursor"),
        limit=args.get("limit", 50),
    )
    return {
        "entities": [entity.to_json() for entity in page.objects],
        "next_cursor": page.next_cursor,
    }


ENTITY_TOOLS = [
    BuiltinTool(
        name="create_entity",
        description="Creates an entity (a typed object with properties) in the knowledge "
        "graph and returns it with its id and version.",
        schema=obj(
            {
                "type": ENTITY_TYPE,
                "key": string(
                    "Optional natural key, unique among entities of this type.", max_length=200
                ),
                "properties": property_bag("The entity's properties."),
            },
            required=("type",),
        ),
        handler=create_entity,
    ),
    BuiltinTool(
        name="get_entity",
        description="Returns one entity by id, with its properties and current version.",
        schema=obj({"id": object_id("Entity id.")}, required=("id",)),
        handler=get_entity,
    ),
    BuiltinTool(
        name="update_entity",
        description="Changes an entity's properties: given keys are set, others kept, "
        "remove_properties deleted. Fails if the entity changed since the version you read; "
        "then get it again and retry.",
        schema=obj(
            {
                "id": object_id("Entity id."),
                "expected_version": VERSION,
                "properties": property_bag("Properties to set."),
                "remove_properties": array(
                    "Property names to delete.", string("Property name."), max_items=100
                ),
            },
            required=("id", "expected_version"),
        ),
        handler=update_entity,
    ),
    BuiltinTool(
        name="delete_entity",
        description="Deletes an entity and all its relationships.",
        schema=obj(
            {
                "id": object_id("Entity id."),
                "expected_version": integer(
                    "Only delete if still at this version.", minimum=1, maximum=2**31 - 1
                ),
            },
            required=("id",),
        ),
        handler=delete_entity,
    ),
    BuiltinTool(
        name="list_entities",
        description="Lists entities oldest first, optionally of one type and with property "
        "values equal to filters. Pass next_cursor back as cursor for the next page.",
        schema=obj(
            {
                "type": ENTITY_TYPE,
                "filters": property_bag("Property values the entities must have (equality)."),
                "cursor": string("next_cursor of the previous page.", max_length=500),
                "limit": limit(50, 200),
            }
        ),
        handler=list_entities,
    ),
]
