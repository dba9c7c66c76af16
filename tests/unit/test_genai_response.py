"""The planned pruning of unknown response fields removes exactly what google-genai's own
``_remove_extra_fields`` removes, at every level of an answer (issue #4)."""

from __future__ import annotations

import copy
import json
from typing import Any

from google.genai import _common, models, types

from agentfleet.llm.genai_response import prune_extra_fields

PARAMETERS = types._GenerateContentParameters(model="stub", config=types.GenerateContentConfig())


def _answer() -> dict[str, Any]:
    """An answer with keys no model knows at every level, and free-form JSON (function
    arguments and responses) whose keys must all stay."""
    return {
        "futureTopLevel": {"x": 1},
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "futureContentKey": True,
                    "parts": [
                        {"text": "t", "thought": True, "thoughtSignature": "AP9zaWc="},
                        {"functionCall": {"name": "f", "args": {"anyKey": {"deep": [1]}}}},
                        {"futurePart": {"y": 2}, "text": "kept"},
                    ],
                },
                "finishReason": "STOP",
                "futureCandidateKey": [1, 2],
                "citationMetadata": {"citations": [{"uri": "u", "futureCitation": 1}]},
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 7,
            "candidatesTokenCount": 3,
            "totalTokenCount": 10,
            "futureTokens": 5,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 7, "future": 0}],
        },
        "modelVersion": "stub",
        "responseId": "r1",
    }


def _parsed() -> dict[str, Any]:
    return models._GenerateContentResponse_from_mldev(_answer(), None, PARAMETERS)


def test_prunes_what_the_sdk_prunes() -> None:
    sdk = _parsed()
    _common._remove_extra_fields(types.GenerateContentResponse, sdk)
    ours = _parsed()
    prune_extra_fields(types.GenerateContentResponse, ours)
    assert json.dumps(ours, sort_keys=True) == json.dumps(sdk, sort_keys=True)
    assert "futureContentKey" not in json.dumps(ours)
    assert ours["candidates"][0]["content"]["parts"][1]["functionCall"]["args"] == {
        "anyKey": {"deep": [1]}
    }


def test_a_pruned_answer_validates_like_the_sdks() -> None:
    expected = types.GenerateContentResponse._from_response(
        response=_parsed(), kwargs={"config": {}}
    )
    ours = _parsed()
    prune_extra_fields(types.GenerateContentResponse, ours)
    got = types.GenerateContentResponse._from_response(
        response=copy.deepcopy(ours), kwargs={"config": {"include_all_fields": True}}
    )
    assert got == expected
