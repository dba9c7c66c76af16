import json

from services.toolpool.results import bound_result, json_size


def test_small_results_pass_unchanged() -> None:
    result = {"id": "x", "items": [1, 2, 3]}
    bounded = bound_result(result, max_bytes=1024)
    assert bounded.result == result
    assert not bounded.truncated
    assert bounded.size_bytes == json_size(result)


def test_large_results_are_cut_with_a_marker() -> None:
    result = {"text": "é" * 50_000}
    bounded = bound_result(result, max_bytes=4096)
    assert bounded.truncated
    assert bounded.size_bytes == json_size(result) > 4096
    assert bounded.result["truncated"] is True
    assert "result truncated" in bounded.result["note"]
    assert str(bounded.size_bytes) in bounded.result["note"]
    assert json_size(bounded.result) <= 4096
    assert bounded.result["preview"].startswith('{"text":"éé')
    json.dumps(bounded.result)  # still valid JSON for the model


def test_escaping_heavy_results_still_fit() -> None:
    result = {"quotes": '"\\' * 20_000, "ctrl": "\u0001" * 5_000}
    bounded = bound_result(result, max_bytes=4096)
    assert bounded.truncated
    assert json_size(bounded.result) <= 4096
