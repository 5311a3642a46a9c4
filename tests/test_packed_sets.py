"""Packed sets (issue 24): a set staged from its pack (one read of one verified blob) answers
exactly as the same set staged member by member through peft's own API; a corrupt pack is
refused, removed and rebuilt, and the answers stay the same; gc keeps a pack while a ref names
its set and removes it (and its record) once none does; a pack is never built from a member
whose bytes do not verify. On SQLite and PostgreSQL (the `repo` fixture), with `mint gc` run
through the CLI and one real `mint serve` process.
"""

from __future__ import annotations

import logging
import os

import pytest

from mint import api
from mint.runtime.batching import BatchPolicy
from mint.runtime.loader import SharedBase
from mint.runtime.packed import pack_loader
from mint.runtime.runtime import Runtime
from mint.runtime.service import store_verifier
from mint.sets import pack as packs
from mint.store import BlobCorrupt

from conftest import snapshot
from support.loop import build_set
from support.serving import start_serve

pytestmark = pytest.mark.one_database(
    "sqlite",
    "a pack is a blob format; test_sets and test_mol_cli commit and serve sets on both databases",
)


TEXTS = ("hello friend , how are you", "please fix the python bug")
TOKENS = 5
ME = "alice"


def runtime_for(repo, base_dir, *, packed: bool, fast: bool = True) -> Runtime:
    """A runtime on a fresh base: staging from packs (PACKED) or member by member, plain
    LoRAs added fast or (FAST False) all through peft's add_adapter and state-dict loading."""
    base = SharedBase.load(base_dir)
    base.fast_lora = fast
    verify = store_verifier(repo)
    load = pack_loader(repo, base, verify) if packed else None
    return Runtime(base, verify=verify, load=load, batching=BatchPolicy.off())


def answers(runtime: Runtime, spec) -> list:
    """Stage and serve SPEC; every routed turn (route, answer, summary) and each expert's own
    greedy answer to each text."""
    runtime.stage(spec)
    runtime.swap()
    out = []
    for text in TEXTS:
        messages = [{"role": "user", "content": text}]
        turn = runtime.turn(messages, max_new_tokens=TOKENS)
        out.append((turn.route, turn.answer, turn.summary))
        for label in spec.labels:
            out.append((label, runtime.turn(messages, model=label, max_new_tokens=TOKENS).answer))
    return out


def served(repo, base_dir, spec, **how) -> list:
    runtime = runtime_for(repo, base_dir, **how)
    try:
        return answers(runtime, spec)
    finally:
        runtime.close()


def pack_id(repo, set_id: str) -> str | None:
    with repo.db.read() as conn:
        return packs.pack_of(conn, set_id)


def flip(path, offset: int) -> None:
    """Change one byte of a read-only blob file in place."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset, os.SEEK_SET if offset >= 0 else os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x5A]))
    os.chmod(path, 0o444)


@pytest.fixture
def macaron(repo, models, tmp_path):
    """The set macaron (router, chat, coding, summary: four adapter commits) and its spec."""
    ids = build_set(repo, models, tmp_path)
    return ids, api.set_spec(repo, ids["set"])


def test_packed_staging_answers_as_peft_loads_each_member(repo, models, macaron, caplog):
    ids, spec = macaron
    reference = served(repo, models["base"], spec, packed=False, fast=False)
    experts = {turn[1] for turn in reference if len(turn) == 2}
    assert len(experts) > 1  # the adapters matter: the experts answer differently
    assert pack_id(repo, spec.id) is None  # staging member by member builds no pack

    with caplog.at_level(logging.INFO, logger="mint"):
        assert served(repo, models["base"], spec, packed=True) == reference
        first = pack_id(repo, spec.id)
        assert first is not None
        repo.store.verify(first)
        assert served(repo, models["base"], spec, packed=True) == reference  # from the store
    built = [r for r in caplog.records if "built from its members" in r.getMessage()]
    assert len(built) == 1  # the second stage read the recorded pack
    assert not [r for r in caplog.records if "is corrupt" in r.getMessage()]
    assert pack_id(repo, spec.id) == first
    # member by member with plain LoRAs added fast: the same answers too
    assert served(repo, models["base"], spec, packed=False) == reference

    with repo.db.read() as conn:
        held = packs.read(repo, spec.id).members()
        assert sorted(held) == sorted(m for m, _ in packs.members_of(conn, spec.id))
    assert set(held) == {f.commit_id for f in [spec.router, spec.summary, *spec.experts.values()]}


@pytest.mark.parametrize("where", ["header", "data"])
def test_a_corrupt_pack_is_refused_removed_and_rebuilt(repo, models, macaron, caplog, where):
    ids, spec = macaron
    reference = served(repo, models["base"], spec, packed=False, fast=False)
    assert served(repo, models["base"], spec, packed=True) == reference
    bad = pack_id(repo, spec.id)
    path = repo.store.local_path(bad)
    flip(path, 20 if where == "header" else -100)
    with pytest.raises(BlobCorrupt):
        repo.store.verify(bad)

    with caplog.at_level(logging.INFO, logger="mint"):
        assert served(repo, models["base"], spec, packed=True) == reference
    warned = [r for r in caplog.records if "is corrupt" in r.getMessage()]
    assert len(warned) == 1 and bad[:12] in warned[0].getMessage()
    assert warned[0].levelno == logging.WARNING
    assert pack_id(repo, spec.id) == bad  # the same members make the same pack
    repo.store.verify(bad)  # rebuilt whole


def test_a_pack_is_never_built_from_member_bytes_that_do_not_verify(repo, models, macaron):
    ids, spec = macaron
    weights = api.show(repo, ids["coding"]).files["adapter_model.safetensors"].sha256
    flip(repo.store.local_path(weights), -8)
    before = snapshot(repo)
    runtime = runtime_for(repo, models["base"], packed=True)
    try:
        with pytest.raises(BlobCorrupt) as refused:
            runtime.stage(spec)
        assert refused.value.blob_id == weights
        assert runtime.active is None and runtime.base.loaded() == {}
    finally:
        runtime.close()
    assert pack_id(repo, spec.id) is None
    assert snapshot(repo) == before  # no pack blob, no record


def test_a_corrupt_pack_over_a_corrupt_member_is_removed_and_not_rebuilt(repo, models, macaron):
    ids, spec = macaron
    served(repo, models["base"], spec, packed=True)
    bad = pack_id(repo, spec.id)
    flip(repo.store.local_path(bad), -100)
    weights = api.show(repo, ids["chat"]).files["adapter_model.safetensors"].sha256
    flip(repo.store.local_path(weights), -8)
    runtime = runtime_for(repo, models["base"], packed=True)
    try:
        with pytest.raises(BlobCorrupt) as refused:
            runtime.stage(spec)
        assert refused.value.blob_id == weights
    finally:
        runtime.close()
    assert not repo.store.has(bad)


def test_gc_keeps_a_pack_while_a_ref_names_its_set(repo, models, macaron, mint):
    ids, spec = macaron
    served(repo, models["base"], spec, packed=True)
    first = pack_id(repo, spec.id)
    api.tag(repo, "v1", ids["set"], by=ME)
    api.commit(repo, "chat", models["a1"], "chat v2", author=ME)
    second_set = api.set_commit(repo, ids["folder"] / "mol.toml", "v2", author=ME).id
    second_spec = api.set_spec(repo, second_set)
    served(repo, models["base"], second_spec, packed=True)
    second = pack_id(repo, second_set)
    assert second not in (None, first)
    assert first not in api.fsck(repo).dangling  # a recorded pack is no stray

    gc = mint("gc", "--grace", "0", "--json")
    assert gc.code == 0, gc
    assert repo.store.has(first) and repo.store.has(second)  # the tag and the head name them

    assert mint("tag", "--delete", "macaron@v1").code == 0
    gc = mint("gc", "--grace", "0", "--json")
    assert gc.code == 0, gc
    assert first in gc.json()["blobs"]
    assert not repo.store.has(first) and pack_id(repo, spec.id) is None
    assert repo.store.has(second) and pack_id(repo, second_set) == second
    for member in spec.experts.values():  # the members' own blobs stay
        assert os.path.exists(member.weights)
    assert api.fsck(repo).ok

    reference = served(repo, models["base"], spec, packed=False, fast=False)
    assert served(repo, models["base"], spec, packed=True) == reference  # built again
    assert pack_id(repo, spec.id) == first


def test_mint_serve_rebuilds_a_corrupt_pack_and_answers_alike(repo, models, macaron, tmp_path):
    ids, spec = macaron
    api.promote(repo, ids["set"], "production", by=ME)
    reference = served(repo, models["base"], spec, packed=False, fast=False)
    routed = [turn for turn in reference if len(turn) == 3]  # (route, answer, summary)
    served(repo, models["base"], spec, packed=True)
    bad = pack_id(repo, spec.id)
    flip(repo.store.local_path(bad), -100)

    server = start_serve(str(repo.root), models["base"], tmp_path / "serve")
    try:
        with server.client() as client:
            for text, (route, answer, _) in zip(TEXTS, routed):
                body = {"model": "macaron", "messages": [{"role": "user", "content": text}]}
                got = client.post("/v1/chat/completions", json={**body, "max_tokens": TOKENS})
                assert got.status_code == 200, got.text
                assert got.json()["mint"]["route"] == route
                assert got.json()["choices"][0]["message"]["content"] == answer
    finally:
        assert server.stop() == 0
    assert "is corrupt" in server.output()
    repo.store.verify(bad)  # rebuilt by the server, under the same id


def test_plain_loras_added_fast_give_the_logits_peft_gives(repo, models, macaron):
    """Each member, added without peft's walks (from the pack, or from its file), computes
    exactly the logits it computes when peft's add_adapter and state-dict loading add it."""
    import torch

    from mint.runtime.engine import load_engine
    from mint.runtime.packed import load_packed_engine

    ids, spec = macaron
    bases = {how: SharedBase.load(models["base"]) for how in ("peft", "fast", "packed")}
    bases["peft"].fast_lora = False
    engines = {
        "peft": load_engine(bases["peft"], spec),
        "fast": load_engine(bases["fast"], spec),
        "packed": load_packed_engine(bases["packed"], spec, repo=repo),
    }
    tokens = torch.tensor([bases["peft"].tokenizer("please fix the python bug")["input_ids"]])
    names = engines["peft"].adapter_names()
    assert len(names) == 4
    logits = {}
    for how, engine in engines.items():
        assert engine.adapter_names() == names
        for name in names:
            with bases[how].using(name) as model:
                logits[how, name] = model(input_ids=tokens).logits
    for name in names:
        assert torch.equal(logits["fast", name], logits["peft", name])
        assert torch.equal(logits["packed", name], logits["peft", name])
    # a1, a2 (chat and summary) and a3: three adapters that change the logits each their way
    assert len({tuple(logits["peft", n][0, -1].tolist()) for n in names}) == 3
    for engine in engines.values():
        engine.close()
