"""The fleet-wide cut of a shared budget between projects (agentfleet.llm.limiter.quota_shares), as
pure values: by weight, work-conserving, no credit for time not asked, bounded."""

from __future__ import annotations

from agentfleet.llm.limiter.quota_shares import ACTIVE_S, MAX_PROJECTS, allocate, settle

WEIGHTS = {"heavy": 3.0, "light": 1.0}


def test_two_processes_each_with_one_project_are_cut_by_weight() -> None:
    shares: dict[str, list[float]] = {}
    vclock, got = 0.0, {"heavy": 0, "light": 0}
    for round_ in range(200):
        # The processes alternate, each asking 4 calls for its own project.
        project = "heavy" if round_ % 2 else "light"
        cut = allocate(shares, vclock, {project: 4}, WEIGHTS, calls=4, now=1000.0, lead=4, rps=20.0)
        shares, vclock = cut.shares, cut.vclock
        got[project] += len(cut.tags)
        if not cut.tags:
            assert 0.1 <= cut.retry_in_s <= 2.0
    assert abs(got["heavy"] / (got["heavy"] + got["light"]) - 0.75) < 0.03


def test_a_project_alone_gets_every_call_and_a_newcomer_no_credit() -> None:
    cut = allocate({}, 0.0, {"heavy": 64}, WEIGHTS, calls=64, now=1000.0, lead=4, rps=20.0)
    assert cut.tags == ("heavy",) * 64
    # A project that starts asking is brought up to the clock: it shares from now on, it is
    # not owed the 64 calls it never asked for.
    later = allocate(
        cut.shares, cut.vclock, {"light": 64}, WEIGHTS, calls=64, now=1001.0, lead=4, rps=20.0
    )
    assert 4 <= later.tags.count("light") <= 8
    # Once heavy stops asking for ACTIVE_S, light is alone: everything again.
    alone = allocate(
        later.shares,
        later.vclock,
        {"light": 10},
        WEIGHTS,
        calls=10,
        now=1001.0 + ACTIVE_S + 1,
        lead=4,
        rps=20.0,
    )
    assert alone.tags == ("light",) * 10
    assert "heavy" not in alone.shares


def test_the_row_holds_a_bounded_number_of_projects() -> None:
    shares = {f"p{i}": [0.0, 1000.0] for i in range(MAX_PROJECTS + 50)}
    cut = allocate(shares, 0.0, {"new": 1}, {}, calls=1, now=1000.0, lead=4, rps=1.0)
    assert len(cut.shares) == MAX_PROJECTS
    assert "new" in cut.shares


def test_slots_used_by_another_project_are_charged_to_it() -> None:
    shares = {"heavy": [10.0, 1000.0], "light": [10.0, 1000.0]}
    settled = settle(shares, 10.0, {"light": 3, "heavy": -3}, WEIGHTS, now=1000.0)
    assert settled["light"][0] == 13.0
    assert settled["heavy"][0] == 9.0
    assert shares["light"][0] == 10.0  # the row's state is not changed in place
