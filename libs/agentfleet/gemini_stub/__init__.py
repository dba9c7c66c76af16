"""A scripted offline model that speaks the Gemini REST API.

Tests, benchmarks and the offline demo point the real google-genai client at it::

    stub = GeminiStub()
    base_url = await stub.start()
    stub.add_script(Script(name="researcher", match_system="You are a researcher", replies=[
        Reply(calls=[Call("web_search", {"query": "gemini"}), Call("web_fetch", {"url": "u"})]),
        Reply(text="Here is the report."),
    ]))
    client = genai.Client(api_key="any", http_options=types.HttpOptions(base_url=base_url))
"""

from agentfleet.gemini_stub.codec import (
    ScriptFormatError,
    reply_from_json,
    reply_to_json,
    script_from_json,
    script_to_json,
    scripts_from_json,
)
from agentfleet.gemini_stub.offline_model import offline_script
from agentfleet.gemini_stub.request import StubRequest
from agentfleet.gemini_stub.script import (
    Call,
    Policy,
    Reply,
    Script,
    ScriptBook,
    ScriptExhausted,
    Usage,
)
from agentfleet.gemini_stub.server import GeminiStub

__all__ = [
    "Call",
    "GeminiStub",
    "Policy",
    "Reply",
    "Script",
    "ScriptBook",
    "ScriptExhausted",
    "ScriptFormatError",
    "StubRequest",
    "Usage",
    "offline_script",
    "reply_from_json",
    "reply_to_json",
    "script_from_json",
    "script_to_json",
    "scripts_from_json",
]
