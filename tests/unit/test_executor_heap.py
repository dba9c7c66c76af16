"""The executor's garbage-collector settings (``settle_heap``): startup's objects frozen out of
every collection, and young collections far rarer than CPython's default."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from services.executor.server import GC_THRESHOLDS, settle_heap


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def collections_while_allocating(count: int) -> int:
    """How many collections run while ``count`` containers are allocated and kept."""
    seen = 0

    def counted(phase: str, info: dict[str, int]) -> None:
        nonlocal seen
        seen += phase == "start"

    kept = []
    gc.callbacks.append(counted)
    try:
        for _ in range(count):
            kept.append({})
    finally:
        gc.callbacks.remove(counted)
    return seen


@pytest.mark.usefixtures("restored_gc")
def test_settle_heap_freezes_startup_and_raises_the_young_threshold() -> None:
    settle_heap()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == GC_THRESHOLDS
    # CPython's default collects every 700 net allocations; the executor's setting lets a
    # step's worth of objects (a few thousand) come and go without a collection.
    assert collections_while_allocating(GC_THRESHOLDS[0] // 2) == 0


@pytest.mark.usefixtures("restored_gc")
def test_cpython_default_would_collect_within_that_many_allocations() -> None:
    # The check above can fail: with the default thresholds the same allocations collect.
    gc.set_threshold(700, 10, 10)
    assert collections_while_allocating(GC_THRESHOLDS[0] // 2) > 0
