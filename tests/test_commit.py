"""Commits, lineage, revisions, tags, diff and byte-exact checkout, through the real CLI."""

import hashlib
import json

import pytest

from mint import api

from conftest import one_line_error


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def based(mint, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    return mint


def test_round_trip_is_byte_exact_and_loads_with_peft(based, repo, models, tmp_path):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    r = based("commit", "chat", models["a1"], "-m", "first", "--json")
    assert r.code == 0, r
    cid = r.json()["id"]
    out = tmp_path / "co"
    assert based("checkout", cid[:10], out).code == 0
    original = sorted(p.name for p in models["a1"].iterdir())
    assert sorted(p.name for p in out.iterdir()) == original
    for name in original:
        assert sha(out / name) == sha(models["a1"] / name), name

    ids = torch.tensor([[1, 5, 9, 14, 3]])
    logits = []
    for folder in (models["a1"], out):
        base = AutoModelForCausalLM.from_pretrained(models["base"])
        model = PeftModel.from_pretrained(base, folder).eval()
        with torch.no_grad():
            logits.append(model(ids).logits)
    assert torch.equal(logits[0], logits[1])
    plain = AutoModelForCausalLM.from_pretrained(models["base"]).eval()
    with torch.no_grad():
        assert not torch.allclose(plain(ids).logits, logits[0])  # the adapter does something


def test_lineage_log_and_revisions(based, repo, models):
    ids = []
    for i, key in enumerate(("a1", "a2", "a1")):
        r = based("commit", "chat", models[key], "-m", f"v{i}", "--meta", f"step={i}", "--json")
        assert r.code == 0 and r.json()["created"], r
        ids.append(r.json()["id"])
    log = based("log", "chat", "--json").json()
    assert [c["id"] for c in log] == ids[::-1]
    assert (
        log[0]["parents"] == [ids[1]] and log[1]["parents"] == [ids[0]] and log[2]["parents"] == []
    )
    assert log[0]["meta"] == {"step": "2"} and log[2]["message"] == "v0"
    assert [c["id"] for c in based("log", "chat", "-n", "2", "--json").json()] == ids[:0:-1]

    assert api.resolve(repo, "chat~2") == ids[0]
    assert api.resolve(repo, "chat~1~1") == ids[0]
    assert api.resolve(repo, f"chat@{ids[1][:9]}") == ids[1]
    assert api.resolve(repo, ids[2][:7]) == ids[2]
    assert api.resolve(repo, ids[2]) == ids[2]
    assert based("tag", "v1", "chat~2").code == 0
    assert api.resolve(repo, "chat@v1") == ids[0]
    assert api.resolve(repo, "chat@v1~0") == ids[0]

    one_line_error(based("show", "chat~3"), "the history of chat has 3 commits", code=1)
    one_line_error(based("show", "nosuchline"), "unknown revision", code=1)
    one_line_error(based("show", "chat@nosuchtag"), "no tag or channel", code=1)
    one_line_error(based("log", "0000000"), "unknown revision", code=1)


def test_ambiguous_prefix_is_one_line(based, repo, models):
    # Commit until two ids share a first hex digit pair... simpler: force a shared 7-char prefix
    # by inserting a second commit row whose id shares the real one's prefix.
    import sqlalchemy as sa

    from mint import schema

    cid = based("commit", "chat", models["a1"], "-m", "x", "--json").json()["id"]
    twin = cid[:10] + ("0" if cid[10] != "0" else "1") + cid[11:]
    with repo.db.write() as conn:
        row = (
            conn.execute(sa.select(schema.commits).where(schema.commits.c.id == cid))
            .one()
            ._asdict()
        )
        conn.execute(schema.commits.insert().values(**{**row, "id": twin}))
    line = one_line_error(based("show", cid[:8]), "ambiguous", code=1)
    assert cid[:10] in line
    assert based("show", cid[:11], "--json").json()["id"] == cid


def test_identical_content_creates_nothing(based, repo, models):
    first = based("commit", "chat", models["a1"], "-m", "one", "--json").json()
    again = based("commit", "chat", models["a1"], "-m", "two")
    assert again.code == 0 and "nothing to commit" in again.out
    assert [c.id for c in api.log(repo, "chat")] == [first["id"]]


def test_show_and_diff_json(based, repo, models):
    a = based("commit", "chat", models["a1"], "-m", "a", "--json").json()["id"]
    b = based("commit", "chat", models["a3"], "-m", "b", "--json").json()["id"]
    based("tag", "v2", b, "-m", "second")
    shown = based("show", "chat@v2", "--json").json()
    assert shown["id"] == b and shown["parents"] == [a] and shown["tags"] == ["chat@v2"]
    assert shown["peft"] == {
        "peft_type": "LORA",
        "r": 8,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "v_proj"],
    }
    assert shown["base"] == "tiny-llama"
    weights = models["a3"] / "adapter_model.safetensors"
    assert shown["files"]["adapter_model.safetensors"] == {
        "sha256": sha(weights),
        "size": weights.stat().st_size,
    }
    names = {t["name"] for t in shown["tensors"]}
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in names
    assert all(t["dtype"] == "F32" and len(t["sha256"]) == 64 for t in shown["tensors"])

    d = based("diff", a, b, "--json").json()
    assert d["config"]["r"] == [4, 8]
    assert any("k_proj" in n for n in d["tensors"]["removed"])
    assert d["tensors"]["added"] == []
    # q and v exist in both with other shapes: changed, but no relative norm between them
    assert len(d["tensors"]["changed"]) == 8
    assert all(c["rel_delta"] is None for c in d["tensors"]["changed"])
    c = based("commit", "chat", models["a2"], "-m", "c", "--json").json()["id"]
    d2 = based("diff", a, c, "--json").json()
    assert d2["config"] == {}
    changed = {x["name"]: x["rel_delta"] for x in d2["tensors"]["changed"]}
    assert len(changed) == 16 and all(v > 0.1 for v in changed.values())


def test_rel_delta_is_the_relative_norm(based, repo, models, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    a = based("commit", "chat", models["a1"], "-m", "a", "--json").json()["id"]
    scaled = tmp_path / "scaled"
    shutil.copytree(models["a1"], scaled)
    tensors = load_file(models["a1"] / "adapter_model.safetensors")
    name = next(iter(sorted(tensors)))
    tensors[name] = tensors[name] * 1.5
    save_file(tensors, scaled / "adapter_model.safetensors", metadata={"format": "pt"})
    b = based("commit", "chat", scaled, "-m", "b", "--json").json()["id"]
    changed = based("diff", a, b, "--json").json()["tensors"]["changed"]
    assert [c["name"] for c in changed] == [name]
    assert changed[0]["rel_delta"] == pytest.approx(0.5, rel=1e-6)


def test_tags_list_force_delete(based, repo, models):
    a = based("commit", "chat", models["a1"], "-m", "a", "--json").json()["id"]
    b = based("commit", "chat", models["a2"], "-m", "b", "--json").json()["id"]
    assert based("tag", "v1", a).code == 0
    one_line_error(based("tag", "v1", b), "--force")
    assert api.resolve(repo, "chat@v1") == a
    assert based("tag", "v1", b, "--force").code == 0
    assert api.resolve(repo, "chat@v1") == b
    listed = based("tag", "--list", "chat", "--json").json()
    assert [(t["line"], t["name"], t["target"]) for t in listed] == [("chat", "v1", b)]
    assert based("tag", "-d", "chat@v1").code == 0
    assert based("tag", "--list", "--json").json() == []
    one_line_error(based("show", "chat@v1"))


def test_ls_and_base_ls(based, repo, models):
    based("commit", "chat", models["a1"], "-m", "a")
    based("commit", "chat", models["a2"], "-m", "b")
    based("commit", "coding", models["a3"], "-m", "c")
    lines = {l["name"]: l for l in based("ls", "--json").json()}
    assert lines["chat"]["commits"] == 2 and lines["coding"]["commits"] == 1
    assert lines["chat"]["head"] == api.resolve(repo, "chat")
    bases = based("base", "ls", "--json").json()
    assert [b["name"] for b in bases] == ["tiny-llama"] and len(bases[0]["fingerprint"]) == 64


def test_fsck_and_gc(based, repo, models):
    based("commit", "chat", models["a1"], "-m", "a")
    assert based("fsck").code == 0
    orphan = repo.store.put_bytes(b"nobody refers to me").id
    report = based("fsck", "--json").json()
    assert report["ok"] and orphan in report["dangling"]
    assert based("gc", "--dry-run", "--grace", "0", "--json").json()["blobs"] == [orphan]
    assert repo.store.has(orphan)
    assert based("gc", "--grace", "3600").code == 0 and repo.store.has(orphan)  # too young
    assert based("gc", "--grace", "0", "--json").json()["executed"]
    assert not repo.store.has(orphan)
    assert based("fsck").code == 0

    weights = api.show(repo, "chat").files["adapter_model.safetensors"].sha256
    path = repo.store.local_path(weights)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    r = based("fsck", "--json")
    assert r.code == 1 and any(weights in p and "corrupt" in p for p in r.json()["problems"])
    path.unlink()
    r = based("fsck")
    assert r.code == 1 and f"missing blob {weights}" in r.out


def test_checkout_of_set_json_and_text_outputs(based, models):
    r = based("commit", "chat", models["a1"], "-m", "a")
    assert len(r.out.strip()) == 64
    assert "chat" in based("log").out and "a" in based("show", "chat").out
    assert json.loads(based("ls", "--json").out)[0]["name"] == "chat"
