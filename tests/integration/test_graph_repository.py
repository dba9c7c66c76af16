"""GraphRepository against a real PostgreSQL: scoping, versions, pagination, traversal, search."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from agentfleet.errors import Aborted, AlreadyExists, InvalidArgument, NotFound
from agentfleet.graph import GraphRepository, NewObject

P, OTHER = "proj-a", "proj-b"


@pytest.fixture
def repo(db_pool: asyncpg.Pool) -> GraphRepository:
    return GraphRepository(db_pool)


async def test_object_of_another_project_is_not_found(repo: GraphRepository) -> None:
    theirs = await repo.create_object(OTHER, type="Note", properties={"title": "secret"})
    mine = await repo.create_object(P, type="Note", properties={"title": "mine"})

    with pytest.raises(NotFound):
        await repo.get_object(P, theirs.id)
    with pytest.raises(NotFound):
        await repo.update_object(P, theirs.id, set_properties={"title": "x"})
    with pytest.raises(NotFound):
        await repo.delete_object(P, theirs.id)
    with pytest.raises(NotFound):
        await repo.get_related(P, theirs.id)
    with pytest.raises(NotFound):
        await repo.traverse(P, theirs.id)
    with pytest.raises(NotFound, match="dst_id"):
        await repo.create_relationship(P, type="links", src_id=mine.id, dst_id=theirs.id)
    page = await repo.list_objects(P)
    assert [o.id for o in page.objects] == [mine.id]
    assert (await repo.get_object(OTHER, theirs.id)).properties == {"title": "secret"}


async def test_malformed_id_names_the_field(repo: GraphRepository) -> None:
    with pytest.raises(InvalidArgument, match="src_id"):
        await repo.create_relationship(P, type="x", src_id="nope", dst_id="nope")


async def test_update_is_optimistic(repo: GraphRepository) -> None:
    obj = await repo.create_object(P, type="Note", properties={"title": "a", "tmp": 1})
    updated = await repo.update_object(
        P, obj.id, set_properties={"title": "b"}, unset_properties=["tmp"], expected_version=1
    )
    assert (updated.version, updated.properties) == (2, {"title": "b"})

    with pytest.raises(Aborted, match="current version is 2"):
        await repo.update_object(P, obj.id, set_properties={"title": "c"}, expected_version=1)
    with pytest.raises(Aborted):
        await repo.delete_object(P, obj.id, expected_version=1)
    assert (await repo.get_object(P, obj.id)).properties == {"title": "b"}
    await repo.delete_object(P, obj.id, expected_version=2)
    with pytest.raises(NotFound):
        await repo.get_object(P, obj.id)


async def test_concurrent_updates_with_one_version_one_wins(repo: GraphRepository) -> None:
    obj = await repo.create_object(P, type="Note", properties={})
    results = await asyncio.gather(
        *(
            repo.update_object(P, obj.id, set_properties={"n": i}, expected_version=1)
            for i in range(5)
        ),
        return_exceptions=True,
    )
    assert sum(not isinstance(r, Exception) for r in results) == 1
    assert all(isinstance(r, Aborted) for r in results if isinstance(r, Exception))
    assert (await repo.get_object(P, obj.id)).version == 2


async def test_key_is_unique_per_type(repo: GraphRepository) -> None:
    await repo.create_object(P, type="Doc", key="k1", properties={})
    with pytest.raises(AlreadyExists):
        await repo.create_object(P, type="Doc", key="k1", properties={})
    await repo.create_object(OTHER, type="Doc", key="k1", properties={})


async def test_list_pages_see_each_object_once(repo: GraphRepository) -> None:
    # Half inserted in one statement, so many share created_at: the id breaks the ties.
    batch = await repo.create_objects(
        P, [NewObject(type="Item", properties={"n": i, "even": i % 2 == 0}) for i in range(12)]
    )
    singles = [
        await repo.create_object(P, type="Item", properties={"n": i, "even": i % 2 == 0})
        for i in range(12, 23)
    ]
    await repo.create_object(P, type="Other", properties={"even": True})
    expected = {o.id for o in batch + singles}

    seen: list[str] = []
    cursor = None
    while True:
        page = await repo.list_objects(P, type="Item", cursor=cursor, limit=5)
        seen += [o.id for o in page.objects]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(expected)
    assert set(seen) == expected

    evens = await repo.list_objects(P, type="Item", filters={"even": True}, limit=100)
    assert sorted(o.properties["n"] for o in evens.objects) == list(range(0, 23, 2))

    first = await repo.list_objects(P, type="Item", limit=5)
    with pytest.raises(InvalidArgument, match="cursor"):
        await repo.list_objects(P, type="Other", cursor=first.next_cursor)
    with pytest.raises(InvalidArgument, match="cursor"):
        await repo.list_objects(P, type="Item", cursor="garbage!")


async def test_relationships_idempotent_and_related(repo: GraphRepository) -> None:
    a, b, c = [await repo.create_object(P, type="N", properties={"name": n}) for n in "abc"]
    first, created = await repo.create_relationship(P, type="links", src_id=a.id, dst_id=b.id)
    again, created_again = await repo.create_relationship(P, type="links", src_id=a.id, dst_id=b.id)
    assert created
    assert not created_again
    assert first.id == again.id
    await repo.create_relationship(P, type="cites", src_id=c.id, dst_id=a.id)

    out = await repo.get_related(P, a.id)
    assert [(r.object.id, r.direction) for r in out] == [(b.id, "out")]
    both = await repo.get_related(P, a.id, direction="both")
    assert {(r.object.id, r.direction) for r in both} == {(b.id, "out"), (c.id, "in")}
    assert await repo.get_related(P, a.id, type="cites") == []
    assert [r.object.id for r in await repo.get_related(P, a.id, type="cites", direction="in")] == [
        c.id
    ]
    assert await repo.get_related(P, b.id, direction="out") == []

    await repo.delete_relationship_between(P, type="links", src_id=a.id, dst_id=b.id)
    with pytest.raises(NotFound):
        await repo.delete_relationship(P, first.id)


async def _tree(repo: GraphRepository, fanout: int, depth: int) -> str:
    """A complete tree of `child` edges (plus `other` edges that traversal must skip)."""
    async with repo.transaction() as tx:
        root = await tx.create_object(P, type="N", properties={"name": "root"})
        level = [root.id]
        for d in range(1, depth + 1):
            new = [
                NewObject(type="N", properties={"name": f"{d}-{i}"})
                for i in range(len(level) * fanout)
            ]
            await tx.create_objects(P, new)
            edges = [("child", level[i // fanout], n.id) for i, n in enumerate(new)]
            edges += [("other", n.id, root.id) for n in new]
            await tx.create_relationships(P, edges)
            level = [str(n.id) for n in new]
    return root.id


async def test_traverse_respects_depth_and_node_cap(repo: GraphRepository) -> None:
    root = await _tree(repo, fanout=3, depth=4)  # 1 + 3 + 9 + 27 + 81 nodes

    two = await repo.traverse(P, root, relationship_types=["child"], max_depth=2, max_nodes=200)
    assert [sum(n.depth == d for n in two.nodes) for d in range(3)] == [1, 3, 9]
    assert not two.truncated
    assert len(two.edges) == 12
    ids = {n.object.id for n in two.nodes}
    assert all(e.src_id in ids and e.dst_id in ids for e in two.edges)

    capped = await repo.traverse(P, root, relationship_types=["child"], max_depth=5, max_nodes=20)
    assert len(capped.nodes) == 20
    assert capped.truncated
    depths = [n.depth for n in capped.nodes]
    assert depths == sorted(depths)
    assert max(depths) == 3
    capped_ids = {n.object.id for n in capped.nodes}
    assert all(e.src_id in capped_ids and e.dst_id in capped_ids for e in capped.edges)

    whole = await repo.traverse(P, root, max_depth=5, max_nodes=200)
    assert len(whole.nodes) == 121
    assert not whole.truncated

    with pytest.raises(InvalidArgument, match="max_depth"):
        await repo.traverse(P, root, max_depth=6)
    with pytest.raises(InvalidArgument, match="max_nodes"):
        await repo.traverse(P, root, max_nodes=201)


async def test_search_fts_and_hybrid(repo: GraphRepository) -> None:
    k8s = await repo.create_object(
        P, type="Doc", properties={"title": "Kubernetes operators", "content": "reconcile loops"}
    )
    for title in ("Kafka consumers", "Operating budgets", "Cooking with butter", "Kubectl tips"):
        await repo.create_object(P, type="Doc", properties={"title": title})
    await repo.create_object(OTHER, type="Doc", properties={"title": "Kubernetes operators"})

    fts = await repo.search_fts(P, "kubernetes")
    assert [s.object.id for s in fts] == [k8s.id]
    assert await repo.search_fts(P, "kubernetse") == []

    hybrid = await repo.search_hybrid(P, "kubernetse")
    assert hybrid
    assert hybrid[0].object.id == k8s.id
    assert hybrid[0].matched_by == ("trigram",)
    assert all(s.object.project_id == P for s in hybrid)

    exact = await repo.search_hybrid(P, "kubernetes operators")
    assert exact[0].object.id == k8s.id
    assert exact[0].matched_by == ("fts", "trigram")
    assert exact[0].score == pytest.approx(2 / 61)
