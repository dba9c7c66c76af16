"""Every Struct is read through agentfleet.structs (issue 37, item 7): a direct
``MessageToDict`` turns a model's 5 into 5.0 again, so only that module may call it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
CALL = re.compile(r"\bMessageToDict\s*\(")


def test_only_agentfleet_structs_calls_message_to_dict() -> None:
    allowed = ROOT / "libs/agentfleet/structs.py"
    callers = [
        str(path.relative_to(ROOT))
        for folder in ("libs", "services")
        for path in (ROOT / folder).rglob("*.py")
        if path != allowed
        and "agentfleet/v1" not in path.as_posix()
        and CALL.search(path.read_text(encoding="utf-8"))
    ]
    assert callers == [], "read Structs with agentfleet.structs.struct_dict / message_dict"
