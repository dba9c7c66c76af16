"""MCP tool result content mapped to the JSON the model reads."""

from __future__ import annotations

import base64

import mcp_types as types

from services.toolpool.mcp import map_call_result


def test_text_and_structured_content() -> None:
    result = types.CallToolResult(
        content=[types.TextContent(text="42")], structured_content={"result": 42}
    )
    assert map_call_result(result) == {
        "content": [{"type": "text", "text": "42"}],
        "structured_content": {"result": 42},
    }


def test_no_structured_content_leaves_the_key_out() -> None:
    mapped = map_call_result(types.CallToolResult(content=[types.TextContent(text="x")]))
    assert "structured_content" not in mapped


def test_small_image_is_inline_with_its_size() -> None:
    data = base64.b64encode(b"\x89PNG....").decode()
    result = types.CallToolResult(content=[types.ImageContent(data=data, mime_type="image/png")])
    assert map_call_result(result)["content"] == [
        {"type": "image", "mime_type": "image/png", "data": data, "size_bytes": 8}
    ]


def test_large_binary_is_replaced_by_a_note_never_silently() -> None:
    data = base64.b64encode(bytes(1000)).decode()
    result = types.CallToolResult(content=[types.AudioContent(data=data, mime_type="audio/wav")])
    [block] = map_call_result(result, max_inline_bytes=100)["content"]
    assert block["data"] is None
    assert block["size_bytes"] == 1000
    assert "1000 bytes omitted" in block["note"]


def test_embedded_text_and_blob_resources() -> None:
    blob = base64.b64encode(b"abc").decode()
    result = types.CallToolResult(
        content=[
            types.EmbeddedResource(
                resource=types.TextResourceContents(
                    uri="file:///a.txt", mime_type="text/plain", text="hello"
                )
            ),
            types.EmbeddedResource(resource=types.BlobResourceContents(uri="file:///b", blob=blob)),
        ]
    )
    assert map_call_result(result)["content"] == [
        {"type": "resource", "uri": "file:///a.txt", "mime_type": "text/plain", "text": "hello"},
        {"type": "resource", "uri": "file:///b", "data": blob, "size_bytes": 3},
    ]


def test_resource_link_keeps_its_metadata() -> None:
    link = types.ResourceLink(
        uri="https://example.test/doc", name="doc", description="the doc", size=12
    )
    [block] = map_call_result(types.CallToolResult(content=[link]))["content"]
    assert block == {
        "type": "resource_link",
        "uri": "https://example.test/doc",
        "name": "doc",
        "description": "the doc",
        "size_bytes": 12,
    }
