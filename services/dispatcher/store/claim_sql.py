"""The task claim's SQL (DESIGN §9 "Loop"): which available SpecTasks a dispatcher with free
slots takes, fairly across projects, and the pieces :mod:`.claims` builds its statements
from. Parameters of :data:`CLAIM`: $1 free slots, $2 lease owner, $3 lease seconds, $4 now.

Fairness (one project must not starve the others). The claim walks the available tasks
project by project, as the executor's run claim does (services/executor/store/claim_sql.py):
``projects`` finds each project with available tasks (a loose index scan, one probe per
project), each project offers its highest-priority tasks, numbered in its own order, and
the claim takes every project's first turn (oldest first), then the second, ... -- round
robin. A project's turns start after the tasks it already has in progress (on any
dispatcher), so a project that holds the slots gets none of those freed while another
project waits. Priority orders tasks within a project only: across projects it would let
any member jump every queue.

A graph at its max_parallel limit blocks nothing: its tasks are left out of its project's
offer, and a limited graph offers no more tasks than it has room for. Both use the tasks in
progress read in this statement's snapshot -- a hint; the exact count is re-checked under
the graph's lock by ``claims._claim_limited``.

Cost: the tasks in progress (at most every dispatcher's slots, plus expired leases not yet
adopted; graph_objects_inprogress_spectasks_idx), one probe per project with available
tasks (projects are made by the operator, not by tenants), then at most $1 +
SKIP_LOCKED_SPARE + WALK_SPARE rows of each project's walk on
graph_objects_ready_spectasks_project_idx, whatever they are. Before, the walk went on over
every task of the project's full graphs ranking above its next claimable one, each claim:
a member's backlog of 9,999 ready tasks per full graph cost every claim of every dispatcher
about 12 ms per graph. A project whose walk ends on full graphs before filling its offer
goes on graph by graph (0021: graph_objects_ready_spectasks_graph_idx): a loose scan of its
graphs with ready tasks, one probe per graph, passing over each full graph in one probe,
keeping the first $1 + SKIP_LOCKED_SPARE, and each kept graph's best tasks past the walk
up to its room. So the rows a claim reads per project are bounded by the claim's size and
the tasks in progress, not by any backlog; only the rows of graphs with room are probed for
their blockers. The price is paid by that project alone: in that case its offer orders by
priority the tasks of those graphs only (its graphs past the first ones, by id, wait).
"""

from __future__ import annotations

from agentfleet.graph import BLOCKS, SPEC_TASK
from agentfleet.graph.task_properties import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    sql_int,
    sql_number,
    sql_uuid,
    task_problem_sql,
)
from services.dispatcher.models import TASK_GRAPH
from services.dispatcher.store.common import CHANGES_CHANNEL, T_COLUMNS, UNFINISHED_BLOCKER

__all__ = [
    "AVAILABLE",
    "BAD_PRIORITY",
    "BLOCKERS",
    "CLAIM",
    "CLAIM_SET",
    "CL_COLUMNS",
    "MAX_PARALLEL",
    "SKIP_LOCKED_SPARE",
    "unless_malformed",
]

# jsonb orders objects, arrays and booleans above every number and strings and null below:
# these bounds select exactly the priorities that are not numbers in range, on the claim
# indexes' own expression (so the check is an index range, not a scan).
BAD_PRIORITY = f"""coalesce((t.properties -> 'priority') > '{PRIORITY_MAX}'::jsonb
                 OR (t.properties -> 'priority') < '{PRIORITY_MIN}'::jsonb, false)"""
MAX_PARALLEL = "coalesce({}, 0)".format(sql_int("g.properties -> 'max_parallel'", 0, 2**31 - 1))

# The task aliased t is available: pending, marked ready (the hint the claim indexes
# serve), its priority well formed and its retry backoff (not_before) passed (_HINTED), and
# re-checked against its blockers (a stale hint never dispatches a blocked task).
_HINTED = f"""t.type = '{SPEC_TASK}' AND t.status = 'pending'
      AND (t.properties ->> 'ready') = 'true' AND NOT {BAD_PRIORITY}
      AND coalesce({sql_number("t.properties -> 'not_before'", 0, 1e12)}, 0)
          <= extract(epoch FROM now())"""
AVAILABLE = f"""{_HINTED}
      AND NOT {UNFINISHED_BLOCKER}"""

# Each project offers this many tasks more than the claim takes, so concurrent dispatchers
# that find the first ones locked by each other move on to the next instead of coming back
# empty-handed.
SKIP_LOCKED_SPARE = 16

# The max_parallel of the graph of the row aliased x (project_id, text graph_id): 0 for no
# limit, NULL when it is not a task graph of x's project. A scalar subquery, so each graph
# is one primary-key probe (a join may be planned as a scan of every task graph).
_GRAPH_LIMIT = f"""(SELECT {MAX_PARALLEL} FROM kb.graph_objects g
        WHERE g.id = {sql_uuid("x.graph_id")} AND g.project_id = x.project_id
          AND g.type = '{TASK_GRAPH}')"""
_READY = f"""t.type = '{SPEC_TASK}' AND t.status = 'pending'
              AND (t.properties ->> 'ready') = 'true'"""
_OFFER_ORDER = "x.priority DESC NULLS LAST, x.created_at, x.id"

# How many rows of a project's walk (graph_objects_ready_spectasks_project_idx) the claim
# reads at most: its offer, plus this many rows it may pass over (tasks of graphs at their
# limit, stale ready hints, retries in backoff) before it goes graph by graph instead.
WALK_SPARE = 32
_OFFER = f"$1 + {SKIP_LOCKED_SPARE}"
_WALK = f"$1 + {SKIP_LOCKED_SPARE + WALK_SPARE}"
_AFTER_WALK = f"""CASE WHEN EXISTS (SELECT 1 FROM full_graphs f WHERE f.project_id = t.project_id
                                     AND f.graph_id = t.properties ->> 'graph_id') THEN false
                   ELSE NOT {UNFINISHED_BLOCKER} END"""

# in_flight: the tasks in progress per graph. full_graphs: the graphs at their limit (at
# most one per task in progress). walked: the first _WALK rows of each project's walk in
# its offer order, whatever they are: the only rows of the project index a claim reads, so
# a full graph's backlog, however long, costs at most _WALK rows (it was read whole, each
# row a heap fetch and a hash probe, on every claim). offered: those available and not of
# a full graph (CASE: the cheap full-graph test first, the blocker probes only for the
# rest), the project's best _OFFER. further: the projects whose walk ended on full graphs
# before filling their offer (it read _WALK rows and more may follow), and what room they
# have left. graph_walk: for those only, the project's graphs with ready tasks in id order
# (a loose scan of graph_objects_ready_spectasks_graph_idx, one probe per graph), passing
# over full graphs (one probe each) and keeping the first _OFFER: bounded by the tasks in
# progress and the claim's size, not by any backlog. deeper: each kept graph's best tasks
# beyond the walk (every row above the walk's end was walked), at most its room. offers:
# the walk's, then the graphs' (all rank below the walk's), the project's best _OFFER. In
# that case priority orders the project's own tasks among those graphs only (its graphs
# past the first _OFFER wait); another project's offer is never affected.
# room: how many more tasks each offered limited graph admits. ranked: the offers a
# limited graph has room for, numbered per project after the project's tasks in progress
# (its turns), the claim's first $1 + SKIP_LOCKED_SPARE turns. candidates: those locked,
# in turn order (= ANY: their rows by primary key; the planner, misjudging how few ready
# tasks pass AVAILABLE, could otherwise scan every ready task to join them).
_FAIR_CANDIDATES = f"""
in_flight AS MATERIALIZED (
    SELECT t.project_id, t.properties ->> 'graph_id' AS graph_id, count(*) AS n
    FROM kb.graph_objects t
    WHERE t.type = '{SPEC_TASK}' AND t.status = 'in_progress'
    GROUP BY 1, 2
), busy AS MATERIALIZED (
    SELECT project_id, sum(n) AS n FROM in_flight GROUP BY 1
), full_graphs AS MATERIALIZED (
    SELECT x.project_id, x.graph_id FROM in_flight x WHERE x.n >= nullif({_GRAPH_LIMIT}, 0)
), projects AS (
    (SELECT t.project_id FROM kb.graph_objects t WHERE {_READY}
     ORDER BY t.project_id
     LIMIT 1)
    UNION ALL
    SELECT (SELECT t.project_id FROM kb.graph_objects t
            WHERE {_READY} AND t.project_id > p.project_id
            ORDER BY t.project_id
            LIMIT 1)
    FROM projects p
    WHERE p.project_id IS NOT NULL
), walked AS MATERIALIZED (
    SELECT o.* FROM projects p
    CROSS JOIN LATERAL (
        SELECT t.id, t.project_id, t.properties ->> 'graph_id' AS graph_id,
               t.properties -> 'priority' AS priority, t.created_at,
               ({_HINTED}) AND {_AFTER_WALK} AS offered
        FROM kb.graph_objects t
        WHERE t.project_id = p.project_id AND {_READY}
        ORDER BY t.project_id, (t.properties -> 'priority') DESC NULLS LAST, t.created_at, t.id
        LIMIT {_WALK}
    ) o
    WHERE p.project_id IS NOT NULL
), offered AS MATERIALIZED (
    SELECT x.*, row_number() OVER (PARTITION BY x.project_id ORDER BY {_OFFER_ORDER}) AS nth
    FROM walked x WHERE x.offered
), further AS MATERIALIZED (
    SELECT w.project_id, {_OFFER} - coalesce(max(o.nth), 0) AS wanted
    FROM walked w LEFT JOIN offered o ON o.id = w.id
    GROUP BY w.project_id
    HAVING count(*) = {_WALK} AND coalesce(max(o.nth), 0) < {_OFFER}
), graph_walk AS (
    SELECT f.project_id, ''::text AS graph_id, 0::bigint AS kept, 0 AS steps FROM further f
    UNION ALL
    SELECT w.project_id, n.graph_id,
           w.kept + (NOT EXISTS (SELECT 1 FROM full_graphs f WHERE f.project_id = w.project_id
                                 AND f.graph_id = n.graph_id))::int,
           w.steps + 1
    FROM graph_walk w
    CROSS JOIN LATERAL (
        SELECT t.properties ->> 'graph_id' AS graph_id FROM kb.graph_objects t
        WHERE t.project_id = w.project_id AND {_READY}
          AND t.properties ->> 'graph_id' > w.graph_id
        ORDER BY t.project_id, t.properties ->> 'graph_id'
        LIMIT 1
    ) n
    WHERE w.kept < {_OFFER}
), deeper AS MATERIALIZED (
    SELECT o.* FROM (
        SELECT DISTINCT ON (w.project_id, w.graph_id) w.project_id, w.graph_id
        FROM graph_walk w
        WHERE w.steps > 0 AND NOT EXISTS (SELECT 1 FROM full_graphs f
                                          WHERE f.project_id = w.project_id
                                            AND f.graph_id = w.graph_id)
    ) x
    CROSS JOIN LATERAL (
        SELECT t.id, t.project_id, t.properties ->> 'graph_id' AS graph_id,
               t.properties -> 'priority' AS priority, t.created_at,
               ({_HINTED}) AND NOT {UNFINISHED_BLOCKER} AS offered
        FROM kb.graph_objects t
        WHERE t.project_id = x.project_id AND {_READY}
          AND t.properties ->> 'graph_id' = x.graph_id
          AND t.id NOT IN (SELECT id FROM walked)
        ORDER BY t.project_id, t.properties ->> 'graph_id',
                 (t.properties -> 'priority') DESC NULLS LAST, t.created_at, t.id
        LIMIT {_OFFER}
    ) o
    WHERE o.offered
), offers AS MATERIALIZED (
    SELECT o.id, o.project_id, o.graph_id, o.priority, o.created_at
    FROM offered o WHERE o.nth <= {_OFFER}
    UNION ALL
    SELECT d.id, d.project_id, d.graph_id, d.priority, d.created_at
    FROM (SELECT x.*, row_number() OVER (PARTITION BY x.project_id
                                         ORDER BY {_OFFER_ORDER}) AS nth
          FROM deeper x) d
    JOIN further f ON f.project_id = d.project_id
    WHERE d.nth <= f.wanted
), room AS MATERIALIZED (
    SELECT x.project_id, x.graph_id, nullif({_GRAPH_LIMIT}, 0) - coalesce(f.n, 0) AS n
    FROM (SELECT DISTINCT project_id, graph_id FROM offers) x
    LEFT JOIN in_flight f ON f.project_id = x.project_id AND f.graph_id = x.graph_id
), ranked AS MATERIALIZED (
    SELECT x.id, x.created_at,
           coalesce(b.n, 0) + row_number() OVER (PARTITION BY x.project_id
                                                  ORDER BY {_OFFER_ORDER}) AS turn
    FROM (SELECT x.*, row_number() OVER (PARTITION BY x.project_id, x.graph_id
                                         ORDER BY {_OFFER_ORDER}) AS in_graph
          FROM offers x) x
    LEFT JOIN room r ON r.project_id = x.project_id AND r.graph_id = x.graph_id
    LEFT JOIN busy b ON b.project_id = x.project_id
    WHERE r.n IS NULL OR x.in_graph <= r.n
    ORDER BY turn, x.created_at, x.id
    LIMIT $1 + {SKIP_LOCKED_SPARE}
), candidates AS MATERIALIZED (
    SELECT t.id, t.project_id, t.properties ->> 'graph_id' AS graph_id, r.turn, r.created_at
    FROM ranked r JOIN kb.graph_objects t ON t.id = r.id
    WHERE {AVAILABLE} AND t.id = ANY (ARRAY(SELECT id FROM ranked))
    ORDER BY r.turn, r.created_at, r.id
    LIMIT $1
    FOR UPDATE OF t SKIP LOCKED
)"""


def unless_malformed(problem: str, claim: str) -> str:
    """SQL: the properties to merge into the task aliased t: ``claim`` when ``problem``
    (a message or NULL) is NULL, else those that end the task failed with it ($4: now)."""
    return f"""coalesce(
        (SELECT jsonb_build_object('status', 'failed', 'ready', false, 'error_message',
                                   'malformed task: ' || bad.m, 'complete_time', $4::text)
         FROM (SELECT {problem} AS m) AS bad WHERE bad.m IS NOT NULL),
        {claim})"""


_CLAIMING = f"""jsonb_build_object(
            'status', 'in_progress', 'ready', false, 'lease_owner', $2::text,
            'lease_expires', extract(epoch FROM now()) + $3::float8,
            'session_id', gen_random_uuid()::text,
            'previous_session_id', t.properties -> 'session_id',
            'attempts', coalesce({sql_int("t.properties -> 'attempts'", 0, 2**31 - 2)}, 0) + 1,
            'start_time', coalesce(t.properties ->> 'start_time', $4::text))"""
CLAIM_SET = f"""
    SET properties = t.properties
          || {unless_malformed(task_problem_sql("t", TASK_GRAPH), _CLAIMING)},
        version = t.version + 1, updated_at = now()"""
# The completed blockers of the claimed task aliased cl, as the prompt wants them.
BLOCKERS = f"""
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
                'key', b.properties ->> 'key', 'title', coalesce(b.properties ->> 'title', ''),
                'summary', coalesce(b.properties ->> 'summary', ''),
                'session_id', b.properties ->> 'session_id') ORDER BY b.properties ->> 'key'),
            '[]'::jsonb)
     FROM kb.graph_relationships r JOIN kb.graph_objects b ON b.id = r.src_id
     WHERE r.project_id = cl.project_id AND r.dst_id = cl.id AND r.type = '{BLOCKS}'
       AND b.status = 'completed') AS blockers"""
CL_COLUMNS = T_COLUMNS.replace("t.", "cl.")

# One autocommit statement claims the candidates of graphs without max_parallel (the usual
# case), with their blockers and the watchers' NOTIFY. Candidates of limited graphs are only
# reported, in the claim's order: counting a graph's running tasks needs a snapshot taken
# after its row is locked, which one statement cannot give (see claims._claim_limited).
# MATERIALIZED: the locking SELECT runs exactly once (a plain subquery may be rescanned,
# and each rescan skips to other rows).
CLAIM = f"""
    WITH RECURSIVE {_FAIR_CANDIDATES}, limited AS MATERIALIZED (
        SELECT x.id, x.turn, x.created_at FROM candidates x WHERE {_GRAPH_LIMIT} > 0
    ), claimed AS (
        UPDATE kb.graph_objects t {CLAIM_SET}
        FROM candidates c
        WHERE t.id = c.id AND t.status = 'pending' AND c.id NOT IN (SELECT id FROM limited)
        RETURNING {T_COLUMNS}
    ), notified AS MATERIALIZED (
        SELECT count(pg_notify('{CHANGES_CHANNEL}', g)) AS n
        FROM (SELECT DISTINCT {sql_uuid("properties ->> 'graph_id'")}::text FROM claimed) AS x (g)
        WHERE g IS NOT NULL
    )
    SELECT {CL_COLUMNS}, {BLOCKERS}, l.ids AS limited_ids
    FROM (SELECT array_agg(id ORDER BY turn, created_at, id) AS ids FROM limited) AS l
    CROSS JOIN notified
    LEFT JOIN claimed cl ON true
    """
