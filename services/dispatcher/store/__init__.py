"""The dispatcher's repository: every statement the dispatcher runs against the database.

Ownership of ``kb.graph_objects`` / ``kb.graph_relationships`` (issue #17):

- The graph library (:mod:`agentfleet.graph`) owns graph content, the objects and
  relationships as users, agents and the toolpool's tools write them. The dispatcher creates
  its TaskGraph, SpecTask and marker objects and their ``blocks`` edges through it
  (``GraphRepository.create_objects`` / ``create_relationships``, ``lock_task_dag``) and
  reads objects by id through it.
- This package owns task execution state: status, readiness, attempts, retries, leases and
  claims, sessions and their edges, cancellation. Those are conditional, set-based updates
  of the properties (one statement per claim or transition), which the library has no
  operation for.

Modules by concept: ``common`` (shared SQL fragments and the NOTIFY channels), ``reads``
(graphs, tasks, edges, counts, listing pages), ``task_graphs`` (request-id lookups, new-edge
checks, cancel, retry), ``claims`` (claim, adopt, lease renewal) with ``claim_sql`` (the
claim statement, fair across projects), ``transitions`` (how an attempt ends),
``dependents`` (readying waiting dependents), ``sessions`` (attempts, their conversations
and triage decisions), ``triage`` (what the failure triage reads, escalation), ``agents``
(reads of the executor's agent definitions) and ``statistics`` (planner statistics).

Callers keep their logic and transactions: functions take the pool or the caller's
connection. Statements are scoped by project_id, except the dispatcher-wide ones that serve
every project at once by design: the claim, adoption, lease renewal and release (by task id
and lease owner), ``classify_new`` and the dependents sweep.
"""
