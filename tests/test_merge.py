"""`mint merge` (issue 39): adapters merged by PEFT's own add_weighted_adapter over the tiny
base, committed with every input as a parent and the recipe in the provenance; `--replay` makes
the same bytes again; the merge loads with PeftModel.from_pretrained and serves in a set; log,
show, the web page's lineage and the Hub's commit list show every parent; inputs that cannot
merge are refused in one line with nothing stored."""

from __future__ import annotations

import re

import httpx
import pytest
import torch
from safetensors.torch import load_file

from mint import api
from mint.runtime.merge import combine

from conftest import one_line_error, snapshot
from support.loop import build_set
from support.registry import create_token, running_registry
from support.texts import MACARON

pytestmark = pytest.mark.one_database(
    "sqlite",
    "a merge is PEFT's arithmetic committed through the commit path test_commit runs on both"
    " databases",
)


METHODS = ["linear", "ties", "dare_linear", "dare_ties", "svd", "cat"]
DENSITY = {"ties": 0.5, "dare_linear": 0.7, "dare_ties": 0.4}


def peft_merge(base, folders, method, weights, *, density=None, seed=0, svd_rank=None) -> dict:
    """What PEFT's add_weighted_adapter gives, called directly on the input folders."""
    from peft import PeftModel, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    names = [f"x{i}" for i in range(len(folders))]
    pm = PeftModel.from_pretrained(model, str(folders[0]), adapter_name=names[0])
    for name, folder in zip(names[1:], folders[1:]):
        pm.load_adapter(str(folder), adapter_name=name)
    options = {"density": density} if density is not None else {}
    options |= {"svd_rank": svd_rank} if svd_rank is not None else {}
    torch.manual_seed(seed)
    pm.add_weighted_adapter(names, weights, "merged", combination_type=method, **options)
    return get_peft_model_state_dict(pm, adapter_name="merged", save_embedding_layers=False)


@pytest.fixture
def based(repo, models, mint):
    """tiny-llama registered; chat holds a1, ux holds a2 (same shape), wide holds a3 (r=8)."""
    api.base_add(repo, "tiny-llama", models["base"])
    ids = {
        line: api.commit(repo, line, models[key], line, author="alice").id
        for line, key in (("chat", "a1"), ("ux", "a2"), ("wide", "a3"))
    }
    return ids


@pytest.mark.parametrize("method", METHODS)
def test_each_method_gives_peft_s_own_tensors(method, based, repo, models, mint, tmp_path):
    other = "wide" if method in ("svd", "cat") else "ux"  # these merge other ranks and targets
    args = ["merge", "blend", "chat", other, "--method", method, "--weights", "0.7,0.4"]
    args += ["--density", str(DENSITY[method])] if method in DENSITY else []
    args += ["--seed", "11", "-m", f"{method} of chat and {other}", "--json"]
    r = mint(*args)
    assert r.code == 0, r
    made = r.json()
    assert made["created"] and made["parents"] == [based["chat"], based[other]]
    out = tmp_path / "co"
    api.checkout(repo, made["id"], out)
    ours = load_file(out / "adapter_model.safetensors")
    key = {"ux": "a2", "wide": "a3"}[other]
    theirs = peft_merge(
        models["base"],
        [models["a1"], models[key]],
        method,
        [0.7, 0.4],
        density=DENSITY.get(method),
        seed=11,
    )
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name
    recipe = api.show(repo, made["id"]).provenance["merge"]
    assert recipe["method"] == method and recipe["inputs"] == [based["chat"], based[other]]
    assert recipe["weights"] == [0.7, 0.4] and recipe["seed"] == 11
    assert recipe["density"] == DENSITY.get(method)
    import peft

    assert recipe["peft"] == peft.__version__ and recipe["torch"] == torch.__version__


def test_replay_makes_the_same_bytes_and_says_when_they_differ(based, repo, mint):
    r = mint("merge", "blend", "chat", "ux", "--method", "dare_ties", "--density", "0.5")
    assert r.code == 2 and "-m MESSAGE" in r.err  # no message: a usage error, nothing merged
    args = ("merge", "blend", "chat", "ux", "--method", "dare_ties", "--density", "0.5")
    made = mint(*args, "--seed", "3", "-m", "dare", "--json").json()["id"]
    again = mint("merge", "--replay", "blend", "--json")
    assert again.code == 0, again
    assert again.json()["identical"] and again.json()["differ"] == []
    assert mint("merge", "--replay", made).out.startswith("identical")

    def other_seed(base, folders, recipe, out):  # the same inputs, DARE drawing otherwise
        return combine(base, folders, recipe | {"seed": recipe["seed"] + 1}, out)

    replay = api.merge_replay(repo, made, combine=other_seed)
    assert not replay.identical and replay.differ == ["adapter_model.safetensors"]
    # a commit that is no merge has no recipe to replay
    one_line_error(mint("merge", "--replay", "chat"), "no merge", code=1)


def test_the_merge_loads_in_peft_and_serves_in_a_set(based, repo, models, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from support.runtime import serving

    made = api.merge(
        repo,
        "chat",
        ["chat", "ux"],
        method="ties",
        density=0.6,
        message="ties",
        author="a",
        combine=combine,
    )
    assert made.parents == [based["chat"], based["ux"]]  # chat's head is an input: once
    out = tmp_path / "co"
    api.checkout(repo, made.id, out)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(models["base"]), out)
    direct = peft_merge(
        models["base"], [models["a1"], models["a2"]], "ties", [0.5, 0.5], density=0.6
    )
    loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
    assert len(loaded) == len(direct) and all(
        torch.equal(p, direct[n.replace(".default", "")]) for n, p in loaded.items()
    )
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "mol.toml").write_text(MACARON.replace('chat = "chat"', f'chat = "{made.id}"'))
    (folder / "route.md").write_text("Route the request to one expert.\n")
    (folder / "summary.md").write_text("Summarise the turn.\n")
    for line, key in (("router", "a1"), ("coding", "a3"), ("summary", "a2")):
        api.commit(repo, line, models[key], line, author="alice")
    spec = api.set_spec(repo, api.set_commit(repo, folder / "mol.toml", "m", author="a").id)
    assert spec.experts["chat"].commit_id == made.id
    runtime = serving(models["base"], spec)
    try:
        turn = runtime.turn([{"role": "user", "content": "hello"}], model="chat")
    finally:
        runtime.close()
    assert turn.route == "chat" and turn.direct and turn.completion_tokens > 0


def test_lineage_shows_every_parent_in_log_show_the_web_page_and_the_hub(based, repo, mint):
    first = mint("merge", "blend", "chat", "ux", "--method", "linear", "-m", "one", "--json")
    first = first.json()
    assert first["parents"] == [based["chat"], based["ux"]]
    second = mint("merge", "blend", "chat", "ux", "--method", "svd", "-m", "two", "--json")
    second = second.json()
    # the line's head first, then every input
    assert second["parents"] == [first["id"], based["chat"], based["ux"]]
    shown = mint("show", "blend", "--json").json()
    assert shown["parents"] == second["parents"]
    text = mint("show", "blend").out
    row = next(line for line in text.splitlines() if line.split()[:1] == ["parents"])
    assert row.split()[1:] == [p[:12] for p in second["parents"]]
    log = mint("log", "blend").out.splitlines()
    at = next(i for i, line in enumerate(log) if line.startswith(f"commit {second['id'][:12]}"))
    assert log[at + 1].split() == ["Merge:", *(p[:12] for p in second["parents"])]
    logged = [c["id"] for c in mint("log", "blend", "--json").json()]
    assert {based["chat"], based["ux"], first["id"]} <= set(logged)
    token = create_token(repo.root, "rita", "reader")
    with running_registry(repo.root) as registry:
        _the_web_page_draws_every_edge(registry, token, second, logged)
        _the_hub_lists_every_parent(registry, token, second)


def _the_web_page_draws_every_edge(registry, token: str, merge: dict, logged: list) -> None:
    with httpx.Client(base_url=registry.url, timeout=60) as web:
        form = web.get("/signin").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
        web.post("/signin", data={"csrf": csrf, "token": token, "next": "/"})
        page = web.get("/line/blend")
    assert page.status_code == 200, page.text
    edges = re.findall(
        r'<line x1="(\d+)" y1="(\d+)" x2="(\d+)" y2="(\d+)" class="edge"', page.text
    )
    row = 14 + 28 * logged.index(merge["id"])
    from_merge = [e for e in edges if int(e[1]) == row]
    assert len(from_merge) == 3  # one edge to each parent, all on the page
    assert {int(e[3]) for e in from_merge} == {14 + 28 * logged.index(p) for p in merge["parents"]}


def _the_hub_lists_every_parent(registry, token: str, merge: dict) -> None:
    from huggingface_hub import HfApi

    hub = HfApi(endpoint=registry.url, token=token)
    listed = hub.list_repo_commits("blend", revision="main")
    assert listed[0].commit_id == merge["id"][:40]
    assert {p[:40] for p in merge["parents"]} <= {c.commit_id for c in listed}
    raw = httpx.get(
        f"{registry.url}/api/models/blend/commits/main",
        headers={"Authorization": f"Bearer {token}"},
    ).json()
    assert raw[0]["parents"] == [p[:40] for p in merge["parents"]]


def test_inputs_that_cannot_merge_are_refused_in_one_line(based, repo, models, mint, tmp_path):
    from mint.examples import tiny

    narrow = tiny.build_adapter(models["base"], tmp_path / "narrow", r=4, targets=("q_proj",))
    mint("commit", "narrow", narrow, "-m", "q only")
    other = tiny.build_base(tmp_path / "other-llama", hidden=32, heads=2)
    mint("base", "add", "other-llama", other)
    mint("commit", "elsewhere", tiny.build_adapter(other, tmp_path / "el", seed=5), "-m", "x")
    ids = build_set(repo, models, tmp_path)  # macaron, a set (its chat is a2 now: r=4)
    before = snapshot(repo)
    cases = [
        (["chat", "wide", "--method", "linear"], "linear needs one rank"),
        (["chat", "narrow", "--method", "ties", "--density", "0.5"], "needs the same targets"),
        (["chat", "elsewhere", "--method", "cat"], "on base other-llama"),
        ([ids["set"], "chat", "--method", "svd"], "is a set commit"),
        (["chat", "--method", "cat"], "two adapters or more"),
        (["chat", "ux", "--method", "ties"], "needs a density"),
        (["chat", "ux", "--method", "linear", "--density", "0.5"], "density is for"),
        (["chat", "ux", "--method", "linear", "--weights", "1"], "2 finite weights"),
    ]
    for args, words in cases:
        one_line_error(mint("merge", "blend", *args, "-m", "x"), words, code=1)
    assert snapshot(repo) == before


def test_a_merge_through_a_registry(based, repo, monkeypatch):
    from mint.cli import run_in_process

    token = create_token(repo.root, "wanda", "writer")
    monkeypatch.setenv("MINT_TOKEN", token)
    with running_registry(repo.root) as registry:
        argv = ["--repo", registry.url, "merge", "blend", "chat", "ux", "--method", "cat"]
        code, out, err = run_in_process([*argv, "-m", "remote", "--json"])
        assert code == 0, err
        again = run_in_process(["--repo", registry.url, "merge", "--replay", "blend"])
    import json

    made = json.loads(out)
    assert made["parents"] == [based["chat"], based["ux"]]
    detail = api.show(repo, "blend")
    assert detail.id == made["id"] and detail.author == "wanda"
    assert detail.provenance["merge"]["method"] == "cat"
    assert again[0] == 0 and again[1].startswith("identical"), again


def test_candidates_propose_merges_and_improve_makes_and_judges_them(loop, repo, models, mint):
    ids, _ = loop  # macaron v1 holds production: router a1, chat a2, coding a3, summary a2
    newer = api.commit(repo, "chat", models["a1"], "chat v2", author="alice").id
    plain = api.candidates(repo, "macaron@production")
    assert all(not c.merges for c in plain)  # merges are opt-in
    found = api.candidates(repo, "macaron@production", merges=["linear", "ties"])
    proposals = [c for c in found if c.merges]
    assert [c.merges["chat"]["recipe"]["method"] for c in proposals] == ["linear", "ties"]
    recipe = proposals[1].merges["chat"]["recipe"]
    assert recipe["inputs"] == [ids["chat"], newer] and recipe["density"] == 0.5
    assert proposals[0].merges["chat"]["line"] == "chat.merges" and proposals[0].changed == []
    listed = mint("candidates", "macaron@production", "--merge", "linear")
    assert f"chat=linear({ids['chat'][:12]}+{newer[:12]})" in listed.out, listed
    r = api.improve(
        repo, "macaron", contract="quality", merges=("linear",), combine=combine, by="loop"
    )
    merged = [s for s in r.steps if s.action == "merge"]
    assert len(merged) == 1 and r.outcome == "canary-started"
    made = api.show(repo, merged[0].commit)
    assert made.line == "chat.merges" and made.parents == [ids["chat"], newer]
    assert made.provenance["merge"]["method"] == "linear"
    judged = [s for s in r.steps if s.action == "evaluate"]
    derived = [s for s in r.steps if s.action == "derive" and "linear merge" in s.detail]
    assert len(derived) == 1 and derived[0].commit in {s.commit for s in judged}
    assert api.set_spec(repo, derived[0].commit).experts["chat"].commit_id == made.id
    # proposed again, the merge already made is named, not made twice
    (again,) = [
        c for c in api.candidates(repo, "macaron@production", merges=["linear"]) if c.merges
    ]
    assert again.members["chat"] == made.id and again.changed == ["chat"]
