"""mint.exchange between two repositories: what push, fetch and clone are built on."""

from __future__ import annotations

import pytest

from mint import api
from mint.errors import InvalidObject, MissingObjects, NotFastForward, RefConflict
from mint.exchange.heads import move_head
from mint.exchange.receiving import import_objects
from mint.exchange.sending import blob_sizes, export_objects, reachable

from conftest import snapshot
from support.texts import PROD


@pytest.fixture
def two(repo, mint, models, tmp_path):
    """A source repository with a line of two commits and an evaluation, and an empty one."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    contract = tmp_path / "c.toml"
    contract.write_text(PROD)
    mint("contract", "add", contract)
    mint("commit", "chat", models["a1"], "-m", "one")
    mint("commit", "chat", models["a2"], "-m", "two")
    mint("eval", "chat", "--contract", "prod", "--metric", "acc=0.9")
    dst, _ = api.init(tmp_path / "dst")
    yield repo, dst
    dst.close()


def send(src, dst, heads, have=()):
    """Blobs first, then the objects: what a push does, without HTTP."""
    with src.db.read() as conn:
        ids = reachable(conn, heads, list(have))
        blobs = blob_sizes(conn, ids)
        payload = export_objects(conn, ids)
    for blob in blobs:
        if not dst.store.has(blob):
            with src.store.open(blob) as f:
                dst.store.put_bytes(f.read())
    return import_objects(dst, payload, pushed_by="pusher")


def test_round_trip_keeps_ids_bytes_and_evaluations(two, tmp_path):
    src, dst = two
    head = api.resolve(src, "chat")
    result = send(src, dst, [head])
    assert len(result.stored) == 2 and result.present == []
    move_head(dst, "chat", None, head, force=False, by="pusher")
    assert [c.id for c in api.log(dst, "chat")] == [c.id for c in api.log(src, "chat")]
    assert api.show(dst, "chat").files == api.show(src, "chat").files
    evs = export_objects(dst.db.engine.connect(), [head])["evaluations"]
    assert [e["metrics"] for e in evs] == [{"acc": 0.9}]
    api.checkout(dst, "chat", tmp_path / "co")
    assert api.fsck(dst).ok
    again = send(src, dst, [head])  # nothing new: everything is present
    assert again.stored == [] and len(again.present) == 2


def test_a_commit_whose_id_does_not_match_is_refused(two):
    src, dst = two
    with src.db.read() as conn:
        payload = export_objects(conn, reachable(conn, [api.resolve(src, "chat")], []))
    payload["commits"][0]["message"] = "rewritten"
    before = snapshot(dst)
    with pytest.raises(InvalidObject):
        import_objects(dst, payload, pushed_by="x")
    assert snapshot(dst) == before


def test_missing_blobs_and_parents_are_refused(two):
    src, dst = two
    head = api.resolve(src, "chat")
    with src.db.read() as conn:
        payload = export_objects(conn, reachable(conn, [head], []))
    with pytest.raises(MissingObjects, match="blobs"):
        import_objects(dst, payload, pushed_by="x")
    send(src, dst, [api.resolve(src, "chat~1")])
    only_head = {**payload, "commits": payload["commits"][1:]}
    send(src, dst, [head], have=[head])  # nothing: but blobs of head are still absent
    with src.db.read() as conn:
        for blob in blob_sizes(conn, [head]):
            with src.store.open(blob) as f:
                dst.store.put_bytes(f.read())
    assert import_objects(dst, only_head, pushed_by="x").stored == [head]


def test_head_moves_fast_forward_only_and_by_compare_and_swap(two, mint, models):
    src, dst = two
    first, second = api.resolve(src, "chat~1"), api.resolve(src, "chat")
    send(src, dst, [second])
    move_head(dst, "chat", None, first, force=False, by="p")
    with pytest.raises(RefConflict):
        move_head(dst, "chat", None, second, force=False, by="p")
    move_head(dst, "chat", first, second, force=False, by="p")
    with pytest.raises(NotFastForward):
        move_head(dst, "chat", second, first, force=False, by="p")
    move_head(dst, "chat", second, first, force=True, by="admin")
    assert api.resolve(dst, "chat") == first
    assert [line.commits for line in api.ls(dst)] == [2]
