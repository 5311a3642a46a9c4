"""Set commits: a MoL configuration pinned to exact adapter commits."""

import hashlib
import json
import tomllib

import pytest

from mint import api

from conftest import one_line_error, snapshot
from support.texts import MACARON_BY_REFS as MOL  # router@v1, chat@production


@pytest.fixture
def setdir(mint, models, tmp_path):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    ids = {}
    for line, key in (("router", "a1"), ("chat", "a2"), ("coding", "a3")):
        ids[line] = mint("commit", line, models[key], "-m", line, "--json").json()["id"]
    mint("tag", "v1", "router")
    mint("promote", "chat", "--to", "production")
    folder = tmp_path / "macaron"
    folder.mkdir()
    (folder / "mol.toml").write_text(MOL)
    (folder / "route.md").write_text("Route the request to one expert.\n")
    (folder / "summary.md").write_text("Summarise the turn.\n")
    return mint, ids, folder


def test_set_pins_exact_commits(setdir, repo, models):
    mint, ids, folder = setdir
    r = mint("set", "commit", folder / "mol.toml", "-m", "first", "--json")
    assert r.code == 0, r
    sid = r.json()["id"]
    shown = mint("show", "macaron", "--json").json()
    assert shown["kind"] == "set" and shown["id"] == sid
    members = {(m["role"], m["label"]): m["commit_id"] for m in shown["members"]}
    assert members == {
        ("router", "router"): ids["router"],
        ("expert", "chat"): ids["chat"],
        ("expert", "coding"): ids["coding"],
        ("summary", "summary"): ids["chat"],
    }
    # Moving the member's channel later does not change the committed set.
    newer = mint("commit", "chat", models["a1"], "-m", "newer", "--json").json()["id"]
    mint("promote", newer, "--to", "production")
    spec = api.set_spec(repo, "macaron")
    assert spec.experts["chat"].commit_id == ids["chat"] and spec.labels == ["chat", "coding"]
    assert spec.route_prompt == "Route the request to one expert.\n" and spec.default == "chat"
    assert spec.router.config["peft_type"] == "LORA"
    weights = models["a1"] / "adapter_model.safetensors"
    assert open(spec.router.weights, "rb").read() == weights.read_bytes()
    assert str(repo.store.root) in spec.router.weights  # served from the store, not a copy
    # Committing again now pins the newer chat: a new set commit whose diff names that member.
    second = mint("set", "commit", folder / "mol.toml", "-m", "second", "--json").json()
    assert second["created"] and second["parents"] == [sid]
    d = mint("diff", sid, second["id"], "--json").json()
    # chat@production and the summary's `chat` (the line's head) both moved to `newer`
    assert d["members"] == {
        "expert:chat": [ids["chat"], newer],
        "summary:summary": [ids["chat"], newer],
    }
    again = mint("set", "commit", folder / "mol.toml", "-m", "third")
    assert "nothing to commit" in again.out
    assert [c["id"] for c in mint("log", "macaron", "--json").json()] == [second["id"], sid]
    assert mint("tag", "v1", sid).code == 0 and api.resolve(repo, "macaron@v1") == sid


def test_set_checkout(setdir, repo, models, tmp_path):
    mint, ids, folder = setdir
    sid = mint("set", "commit", folder / "mol.toml", "--json").json()["id"]
    out = tmp_path / "co"
    assert mint("checkout", "macaron", out).code == 0
    mol = tomllib.loads((out / "mol.toml").read_text())
    assert mol["router"]["adapter"] == ids["router"] and mol["experts"]["coding"] == ids["coding"]
    assert mol["summary"]["adapter"] == ids["chat"] and mol["router"]["labels"] == [
        "chat",
        "coding",
    ]
    assert (out / "route.md").read_text() == (folder / "route.md").read_text()
    for label, key in (("router", "a1"), ("chat", "a2"), ("coding", "a3"), ("summary", "a2")):
        for f in models[key].iterdir():
            assert (
                hashlib.sha256((out / label / f.name).read_bytes()).hexdigest()
                == hashlib.sha256(f.read_bytes()).hexdigest()
            )
    # The checked-out mol.toml commits back to the same set.
    assert "nothing to commit" in mint("set", "commit", out / "mol.toml").out
    assert api.resolve(repo, "macaron") == sid


def test_set_refusals(setdir, repo, models, tmp_path):
    mint, ids, folder = setdir
    other = tmp_path / "other-base"
    other.mkdir()
    cfg = json.loads((models["base"] / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "rope_theta": 1234.0}))
    mint("base", "add", "other", other)
    mint("commit", "foreign", models["a1"], "-m", "x", "--base", "other")
    before = snapshot(repo)

    def refuse(text, expect, prompts=True):
        (folder / "mol.toml").write_text(text)
        one_line_error(mint("set", "commit", folder / "mol.toml"), expect)
        assert snapshot(repo) == before

    refuse(
        MOL.replace('coding = "coding"', 'coding = "foreign"'),
        "the set's base is tiny-llama",
    )
    refuse(MOL.replace('coding = "coding"\n', ""), "label 'coding' has no expert")
    refuse(MOL.replace('"route.md"', '"missing.md"'), "prompt file missing.md is missing")
    refuse(MOL.replace('"route.md"', '"../escape.md"'), "must be a relative path inside")
    # Layouts that would collide in a checkout or a vLLM export
    two = MOL.replace('labels = ["chat", "coding"]', 'labels = ["chat", "{0}"]')
    for label in ("router", "summary", "mol.toml", "router.json", "lora-modules.json", "Router"):
        refuse(two.format(label).replace("coding = ", f'"{label}" = '), "collides with")
    refuse(MOL.replace('"summary.md"', '"chat/summary.md"'), "collides with expert chat")
    refuse(MOL.replace('"summary.md"', '"router/x.md"'), "collides with the router")
    refuse(MOL.replace('"summary.md"', '"mol.toml"'), "collides with the file mol.toml")
    # A prompt that is a symbolic link (here: out of the folder), or not UTF-8 text
    (tmp_path / "outside.md").write_text("secret\n")
    (folder / "linked.md").symlink_to(tmp_path / "outside.md")
    refuse(MOL.replace('"route.md"', '"linked.md"'), "symbolic link")
    (folder / "latin1.md").write_bytes("caf\xe9\n".encode("latin-1"))
    refuse(MOL.replace('"route.md"', '"latin1.md"'), "not UTF-8")
    refuse(MOL.replace('default = "chat"', 'default = "ui"'), "not one of the labels")
    refuse(MOL.replace('"router@v1"', '"router@v9"'), "no tag or channel")
    refuse(
        MOL.replace("[summary]", "[nothing]"),
        "needs [router], [experts] and [summary]",
    )
    refuse(
        MOL.replace('adapter = "chat"', 'adapter = "macaron"').replace(
            'name = "macaron"', 'name = "chat"'
        ),
        "unknown",
    )
    refuse("name = [", "not valid TOML")
