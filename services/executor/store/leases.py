"""A worker's leases on its running runs, renewed and released many at a time (DESIGN §A
run's path, 2). Each statement takes the run rows in the order a group commit takes them
(:mod:`~services.executor.store.group_commit`), so it and a group never each wait for the
other."""

from __future__ import annotations

from collections.abc import Sequence

from services.executor.store.runs import Db

_OWNED_IN_LOCK_ORDER = """
WITH owned AS (
    SELECT id FROM kb.agent_runs
    WHERE id = ANY($1::uuid[]) AND lease_owner = $2 AND status = 'running'
    ORDER BY project_id COLLATE "C", id
    FOR NO KEY UPDATE
)
"""
"""The running runs of ``$1`` that ``$2`` holds, locked in the order a group commit locks
run rows (:mod:`~services.executor.store.group_commit`): a statement that takes several run
rows takes them in that order, or it and a group could each wait for the other. NO KEY
UPDATE is what the UPDATE itself takes: a plain FOR UPDATE would also block every foreign-key
check on those runs (an event or message insert of another run's transaction)."""


async def heartbeat(
    db: Db, run_ids: Sequence[str], owner: str, lease_s: float
) -> list[tuple[str, bool]]:
    """Renews the leases ``owner`` still holds on ``run_ids`` (across projects: a worker
    serves them all); (run id, cancel requested) of each renewed one."""
    rows = await db.fetch(
        _OWNED_IN_LOCK_ORDER
        + """
        UPDATE kb.agent_runs r
        SET lease_expires_at = now() + make_interval(secs => $3::double precision)
        FROM owned WHERE r.id = owned.id
        RETURNING r.id, r.cancel_requested_at
        """,
        list(run_ids),
        owner,
        lease_s,
    )
    return [(str(r["id"]), r["cancel_requested_at"] is not None) for r in rows]


async def release(db: Db, run_ids: Sequence[str], owner: str, *, hand_to: str | None = None) -> int:
    """Expires ``owner``'s leases on ``run_ids`` now (any project), left under ``hand_to``
    when given (else still ``owner``'s); how many it released."""
    result = await db.execute(
        _OWNED_IN_LOCK_ORDER + "UPDATE kb.agent_runs r SET lease_expires_at = now(), "
        "lease_owner = coalesce($3::text, r.lease_owner) FROM owned WHERE r.id = owned.id",
        list(run_ids),
        owner,
        hand_to,
    )
    return int(result.split()[-1])
