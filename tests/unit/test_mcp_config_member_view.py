"""What a member reads of an MCP server's settings: values naming a secret as they are,
every literal hidden (an admin may have typed a credential there)."""

from agentfleet.mcp.config import HIDDEN_VALUE, member_view


def test_env_and_header_values_naming_no_secret_are_hidden() -> None:
    shown = member_view(
        {
            "name": "web",
            "env": {"A": "literal", "B": "${KEY}", "C": "prefix-${KEY}"},
            "headers": {"Authorization": "Bearer sk-1", "X-Key": "Bearer ${KEY}"},
        }
    )
    assert shown["name"] == "web"
    assert shown["env"] == {"A": HIDDEN_VALUE, "B": "${KEY}", "C": "prefix-${KEY}"}
    assert shown["headers"] == {"Authorization": HIDDEN_VALUE, "X-Key": "Bearer ${KEY}"}


def test_a_urls_literal_password_and_query_are_hidden() -> None:
    url = "https://user:pa55@mcp.example.com/sse?api_key=abc"
    assert member_view({"url": url})["url"] == "https://user:***@mcp.example.com/sse?***"
    named = "https://user:${PASS}@mcp.example.com/sse?api_key=${KEY}"
    assert member_view({"url": named})["url"] == named
    assert member_view({"url": None})["url"] is None
    assert member_view({})["env"] == {}
