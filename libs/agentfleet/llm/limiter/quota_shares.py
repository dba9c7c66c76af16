"""Fair shares of one shared model budget between projects, across every process.

Each process's queue is fair between the projects waiting *in it*
(:mod:`agentfleet.llm.limiter.quota_queue`), but grants come from one row for every process: a
process holding only one project's runs would get as many grants as one holding another's,
whatever their weights. So the row keeps weighted fair queueing's virtual time per project
(``shares``: project -> ``[virtual_time, last_asked]``, and ``vclock``, the virtual time
of the last call granted), and each grant is cut between the projects its process wants
calls for: call by call to the wanted project with the least virtual finish time, each
call adding ``1 / weight`` to its project, and a project never more than ``lead`` (one
grant's worth) ahead of the least-served project contending on any process. A project
contends while some process asked for it within ``active_s``; one that starts contending
is brought up to ``vclock`` (no credit for the time it did not ask), so only contending
projects share and a project alone gets everything (work-conserving). A grant that finds
every project it wants ahead is refused for the short time the others need to catch up;
its projects still count as contending, so the others' grants are capped meanwhile.

Pure functions, no I/O: :func:`agentfleet.llm.limiter.quota_math.take_grant` calls
:func:`allocate` under the row's lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

ACTIVE_S = 3.0
"""A project contends for this long after a process last asked a grant for it."""
MAX_PROJECTS = 256
"""Contending projects kept in the row (the most recently asked ones): bounds its size."""
MAX_WANTED_PROJECTS = 32
"""Projects one grant request may name (the process's most waiting ones)."""
MIN_RETRY_S, MAX_RETRY_S = 0.1, 2.0


def settle(
    shares: Mapping[str, list[float]],
    vclock: float,
    debt: Mapping[str, int],
    weights: Mapping[str, float],
    *,
    now: float,
) -> dict[str, list[float]]:
    """``shares`` with each project of ``debt`` charged (or refunded) its calls: a process
    gave slots granted for one project to another's call (its own queue's order), so the
    virtual times count what each project really used. At most MAX_WANTED_PROJECTS."""
    settled = {p: list(e) for p, e in shares.items()}
    for project, calls in list(debt.items())[:MAX_WANTED_PROJECTS]:
        entry = settled.setdefault(project, [vclock, now])
        entry[0] += calls / max(weights.get(project, 1.0), 1e-6)
    return settled


@dataclass(frozen=True, slots=True)
class Allocation:
    tags: tuple[str, ...]
    """The project of each granted call, in the order granted (empty: none granted)."""
    shares: dict[str, list[float]]
    vclock: float
    retry_in_s: float
    """With nothing granted: about when the projects wanted are back within their lead."""


def allocate(
    shares: Mapping[str, list[float]],
    vclock: float,
    wants: Mapping[str, int],
    weights: Mapping[str, float],
    *,
    calls: int,
    now: float,
    lead: float,
    rps: float | None,
    active_s: float = ACTIVE_S,
) -> Allocation:
    """Up to ``calls`` calls cut between the projects of ``wants`` (calls wanted each)."""
    live = {p: [vt, seen] for p, (vt, seen) in shares.items() if seen >= now - active_s}
    wanted = {p: n for p, n in wants.items() if n > 0}
    for project in wanted:
        entry = live.get(project)
        if entry is None:
            live[project] = [vclock, now]
        else:
            entry[1] = now

    def weight(project: str) -> float:
        return max(weights.get(project, 1.0), 1e-6)

    def floors() -> tuple[tuple[float, str], tuple[float, str]]:
        """The two least virtual times contending (a project's floor is the least of the
        others'), found once per call granted: O(contending) each."""
        first = second = (float("inf"), "")
        for p, e in live.items():
            if (e[0], p) < first:
                first, second = (e[0], p), first
            elif (e[0], p) < second:
                second = (e[0], p)
        return first, second

    def floor_of(project: str, two: tuple[tuple[float, str], tuple[float, str]]) -> float:
        return two[1][0] if two[0][1] == project else two[0][0]

    tags: list[str] = []
    left = dict(wanted)
    while len(tags) < calls and left:
        two = floors()
        # The wanted project whose next call finishes first, if it stays within its lead.
        chosen = None
        for project in sorted(left, key=lambda p: live[p][0] + 1 / weight(p)):
            if live[project][0] + 1 / weight(project) <= floor_of(project, two) + lead:
                chosen = project
                break
        if chosen is None:
            break
        entry = live[chosen]
        vclock = max(vclock, entry[0])
        entry[0] += 1 / weight(chosen)
        tags.append(chosen)
        left[chosen] -= 1
        if not left[chosen]:
            del left[chosen]
    retry_in = 0.0
    if not tags and wanted:
        # How long the least-served other project takes to come within the lead: its
        # virtual time grows by 1/weight per call, at most ``rps`` calls a second.
        two = floors()
        retry_in = min(
            (live[p][0] + 1 / weight(p) - floor_of(p, two) - lead)
            * weight(two[1][1] if two[0][1] == p else two[0][1])
            for p in wanted
        )
        retry_in = retry_in / rps if rps else MAX_RETRY_S
        retry_in = min(MAX_RETRY_S, max(MIN_RETRY_S, retry_in))
    if len(live) > MAX_PROJECTS:
        kept = sorted(live, key=lambda p: (p in wanted, live[p][1]), reverse=True)[:MAX_PROJECTS]
        live = {p: live[p] for p in kept}
    return Allocation(tags=tuple(tags), shares=live, vclock=vclock, retry_in_s=retry_in)
