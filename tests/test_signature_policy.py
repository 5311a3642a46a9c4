"""Signature policy (issue 23): a contract's `[signature]`, which the gate enforces at every
door (the CLI, a registry's API), `mint serve --require-signed [--keys ...]`, and the vLLM
plugin's source with MINT_VLLM_REQUIRE_SIGNED. Real CLI, real `mint registry serve` and `mint
serve` processes, SQLite and PostgreSQL (`repo`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mint import api
from mint.cli import run_in_process
from mint.errors import InvalidConfig, NotVerified
from mint.remote.repo import RemoteRepo
from mint.runtime.signatures import SignatureGuard
from mint.vllm.adapters import AdapterSource

from conftest import Result, one_line_error, refused, snapshot
from support import free_port, wait_until
from support.loop import build_set
from support.registry import create_token, running_registry
from support.serving import BODY, start_serve
from support.texts import PROD

pytestmark = pytest.mark.one_database(
    "sqlite",
    "the policy judges signatures; test_signing_trust and test_signed_moves store them on both"
    " databases",
)


SIGNED_PROD = PROD + '[signature]\nrequired = true\nkeys = ["alice"]\n'
EXIT_GATE = 3
USER = "tester"


def keys(repo, tmp_path: Path, *names: str) -> dict:
    """A key pair per NAME, each trusted in REPO under its name: name -> private key path."""
    out = {}
    for name in names:
        generated = api.key_generate(tmp_path / "keys" / name)
        api.key_add(repo, name, Path(generated.public_key).read_text(), by=USER)
        out[name] = generated.private_key
    return out


def contract(tmp_path: Path, text: str, name: str = "prod.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def signature_row(report: dict) -> dict:
    (row,) = [c for c in report["checks"] if c["check"] == "signature"]
    return row


# --- the contract's [signature] ------------------------------------------------------------


@pytest.mark.parametrize(
    "table, expect",
    [
        ("signature = true\n", "[signature] must be a table"),
        ("[signature]\nrequired = true\nwho = 1\n", "unknown signature key 'who'"),
        ('[signature]\nrequired = "yes"\n', "signature.required must be true or false"),
        ('[signature]\nrequired = true\nkeys = "alice"\n', "signature.keys must be a list"),
        ('[signature]\nkeys = ["alice"]\n', "signature.required is not true"),
        ('[signature]\nrequired = true\nkeys = ["a b"]\n', "signature.keys"),
    ],
)
def test_a_bad_signature_table_is_one_line_and_stores_nothing(repo, mint, tmp_path, table, expect):
    path = contract(tmp_path, PROD + table if table.startswith("[") else table + PROD)
    refused(mint, repo, ("contract", "add", path), expect)


def test_a_signature_table_is_part_of_the_contract_and_absent_changes_nothing(
    repo, mint, tmp_path
):
    plain = mint("contract", "add", contract(tmp_path, PROD), "--json").json()["contract"]
    assert plain["signature"] is None
    again = mint("contract", "add", contract(tmp_path, PROD), "--json").json()
    assert again["created"] is False  # no [signature]: the same body and id as before
    text = PROD + '[signature]\nrequired = true\nkeys = ["bob", "alice", "bob"]\n'
    signed = mint("contract", "add", contract(tmp_path, text), "--json").json()["contract"]
    assert signed["version"] == 2
    assert signed["signature"] == {"required": True, "keys": ["alice", "bob"]}
    shown = mint("contract", "show", "prod", "--json").json()
    assert shown["signature"] == signed["signature"]
    assert "signature: required, by alice or bob" in mint("contract", "show", "prod").out
    assert "signature" not in mint("contract", "show", "prod", "--version", "1").out


# --- the gate --------------------------------------------------------------------------------


def test_the_gate_refuses_an_unsigned_commit_and_another_key_and_passes_the_named_one(
    repo, mint, models, tmp_path
):
    private = keys(repo, tmp_path, "alice", "bob")
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    assert mint("contract", "add", contract(tmp_path, SIGNED_PROD)).code == 0
    assert mint("commit", "chat", models["a1"], "-m", "one").code == 0
    assert mint("eval", "chat", "--contract", "prod", "--metric", "acc=0.9").code == 0

    promote = ("promote", "chat", "--to", "production")
    before = snapshot(repo)
    line = one_line_error(mint(*promote), "signature: it carries no signature", EXIT_GATE)
    assert "signed by alice" in line and snapshot(repo) == before
    row = signature_row(mint("gate", "chat", "--to", "production", "--json").json())
    assert row == {
        "check": "signature",
        "required": "signed by alice",
        "found": "it carries no signature",
        "ok": False,
    }

    sign = ("commit", "chat", models["a1"], "-m", "one", "--sign")
    assert mint(*sign, private["bob"]).code == 0  # the same folder: signs the head
    one_line_error(mint(*promote), "it is signed by bob, not by alice", EXIT_GATE)
    assert api.status(repo)[0].channels == {}

    assert mint(*sign, private["alice"]).code == 0
    r = mint(*promote, "--json")
    assert r.code == 0, r
    assert api.resolve(repo, "chat@production") == api.resolve(repo, "chat")
    row = signature_row(mint("gate", "chat", "--to", "production", "--json").json())
    assert (row["found"], row["ok"]) == ("signed by alice", True)


def test_a_key_no_longer_trusted_no_longer_passes_and_a_keyless_table_takes_any_key(
    repo, mint, models, tmp_path
):
    private = keys(repo, tmp_path, "carol")
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    any_key = PROD + "[signature]\nrequired = true\n"
    assert mint("contract", "add", contract(tmp_path, any_key)).code == 0
    sign = ("commit", "chat", models["a1"], "-m", "one", "--sign", private["carol"])
    assert mint(*sign).code == 0
    assert mint("eval", "chat", "--contract", "prod", "--metric", "acc=0.9").code == 0
    row = signature_row(mint("gate", "chat", "--to", "production", "--json").json())
    assert (row["required"], row["found"], row["ok"]) == (
        "signed by a trusted key",
        "signed by carol",
        True,
    )
    assert mint("key", "rm", "carol").code == 0
    r = mint("promote", "chat", "--to", "production")
    one_line_error(r, "which is not trusted here", EXIT_GATE)


def test_a_set_passes_the_gate_only_on_its_own_signature(repo, mint, models, tmp_path):
    """Every member signed is not enough (issue 35): the set's own files decide what users
    get, so the gate takes a set only when the set itself is signed."""
    ids = build_set(repo, models, tmp_path)
    private = keys(repo, tmp_path, "alice")
    assert mint("contract", "add", contract(tmp_path, SIGNED_PROD)).code == 0
    assert mint("eval", ids["set"], "--contract", "prod", "--metric", "acc=0.9").code == 0
    folders = {"router": "a1", "chat": "a2", "coding": "a3", "summary": "a2"}
    for line in folders:
        r = mint("commit", line, models[folders[line]], "-m", line, "--sign", private["alice"])
        assert r.code == 0, r
    promote = ("promote", ids["set"], "--to", "production")
    one_line_error(mint(*promote), "signature: it carries no signature", EXIT_GATE)
    mol = ids["folder"] / "mol.toml"
    assert mint("set", "commit", mol, "-m", "s", "--sign", private["alice"]).code == 0
    assert mint(*promote).code == 0
    row = signature_row(mint("gate", ids["set"], "--to", "production", "--json").json())
    assert row["ok"] and "signed by alice" in row["found"]


def test_a_set_signed_by_a_named_key_passes_though_its_members_carry_another(
    repo, mint, models, tmp_path
):
    """The set's own signature (over its members' signatures and its mol.toml, which pins
    each member's id) vouches for them: the gate and `mint serve --require-signed`'s guard
    take it when KEYS names its signer, though bob signed the members."""
    ids = build_set(repo, models, tmp_path)
    private = keys(repo, tmp_path, "alice", "bob")
    for line, folder in (("router", "a1"), ("chat", "a2"), ("coding", "a3"), ("summary", "a2")):
        api.commit(repo, line, models[folder], line, author=USER, sign=private["bob"])
    assert mint("contract", "add", contract(tmp_path, SIGNED_PROD)).code == 0
    assert mint("eval", ids["set"], "--contract", "prod", "--metric", "acc=0.9").code == 0
    promote = ("promote", ids["set"], "--to", "production")
    one_line_error(mint(*promote), "it carries no signature", EXIT_GATE)
    guard = SignatureGuard(repo, ["alice"])
    with pytest.raises(NotVerified, match="carries no signature"):
        guard.check(ids["set"])
    mol = ids["folder"] / "mol.toml"
    r = mint("set", "commit", mol, "-m", "first", "--sign", private["alice"])
    assert r.code == 0, r
    assert api.resolve(repo, "macaron") == ids["set"]  # the unchanged head, signed
    assert guard.check("macaron") == ids["set"]
    assert mint(*promote).code == 0
    row = signature_row(mint("gate", ids["set"], "--to", "production", "--json").json())
    assert (row["found"], row["ok"]) == ("signed by alice", True)


def test_the_gate_refuses_through_a_registry(repo, models, tmp_path, monkeypatch):
    """REPO is the registry's: a client pushes, evaluates and promotes through its API."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    api.base_add(repo, "tiny-llama", models["base"])
    private = keys(repo, tmp_path, "alice", "bob")
    api.contract_add(repo, contract(tmp_path, SIGNED_PROD), by=USER)
    token = create_token(repo.root, "ada", "admin")
    monkeypatch.setenv("MINT_TOKEN", token)
    client, _ = api.init(tmp_path / "client")
    api.base_add(client, "tiny-llama", models["base"])
    client.close()
    local = lambda *a: Result(*run_in_process(["--repo", str(tmp_path / "client"), *map(str, a)]))  # noqa: E731
    with running_registry(repo.root) as registry:
        remote = lambda *a: Result(*run_in_process(["--repo", registry.url, *map(str, a)]))  # noqa: E731
        assert local("remote", "add", "origin", registry.url).code == 0
        shown = remote("contract", "show", "prod", "--json").json()
        assert shown["signature"] == {"required": True, "keys": ["alice"]}

        def pushed(folder, *sign) -> str:
            assert local("commit", "chat", folder, "-m", "v", *sign).code == 0
            assert local("push", "origin", "chat").code == 0, "push"
            r = remote("eval", "chat", "--contract", "prod", "--metric", "acc=0.9")
            assert r.code == 0, r
            return remote("promote", "chat", "--to", "production")

        one_line_error(pushed(models["a1"]), "it carries no signature", EXIT_GATE)
        one_line_error(pushed(models["a2"], "--sign", private["bob"]), "not by alice", EXIT_GATE)
        assert api.status(repo)[0].channels == {}
        r = pushed(models["a3"], "--sign", private["alice"])
        assert r.code == 0, r
        r = remote("gate", "chat", "--to", "production", "--json")
        assert signature_row(r.json())["found"] == "signed by alice"
        # what `mint --repo URL serve --require-signed --keys alice` judges: by the registry's keys
        guard = SignatureGuard.open(RemoteRepo(registry.url, token, cache=None), ["alice"])
        assert guard.check("chat@production") == api.resolve(repo, "chat")
        with pytest.raises(NotVerified, match="it is signed by bob, not by alice"):
            guard.check("chat~1")
    assert api.resolve(repo, "chat@production") == api.resolve(repo, "chat")


# --- mint serve --require-signed --------------------------------------------------------------


def serve_args(repo, models, *extra) -> list[str]:
    return [
        "--repo", str(repo.root), "serve", "macaron@production", "--base-dir",
        str(models["base"]), "--port", str(free_port()), *map(str, extra),
    ]  # fmt: skip


def test_serve_require_signed_refuses_an_unsigned_set_at_start(repo, models, tmp_path):
    ids = build_set(repo, models, tmp_path)
    api.promote(repo, ids["set"], "production", by=USER)
    keys(repo, tmp_path, "alice")
    r = Result(*run_in_process(serve_args(repo, models, "--require-signed")))
    one_line_error(r, "is not verified: it carries no signature", code=1)
    r = Result(*run_in_process(serve_args(repo, models, "--require-signed", "--keys", "alise")))
    one_line_error(r, "no trusted key named", code=1)
    r = Result(*run_in_process(serve_args(repo, models, "--keys", "alice")))
    one_line_error(r, "--keys needs --require-signed", code=2)


def sign_set(repo, models, ids: dict, private_key) -> None:
    """Every member of the set IDS names signed with PRIVATE_KEY, then the set itself (the
    unchanged head signed): a set is judged on its own signature."""
    for line, folder in (("router", "a1"), ("chat", "a2"), ("coding", "a3"), ("summary", "a2")):
        api.commit(repo, line, models[folder], line, author=USER, sign=private_key)
    r = api.set_commit(repo, ids["folder"] / "mol.toml", "s", author=USER, sign=private_key)
    assert (r.id, r.signed) == (ids["set"], 1)


def refusals(metrics: str) -> dict[str, float]:
    found = re.findall(r'^mint_signature_refusals_total\{reason="(\w+)"\} (\S+)$', metrics, re.M)
    return {reason: float(n) for reason, n in found}


def serving(metrics: str) -> str:
    return re.search(r'^mint_serving_info\{set="macaron",commit="(\w+)"\} 1$', metrics, re.M)[1]


def test_serve_keeps_the_signed_version_when_promoted_to_an_unsigned_one(repo, models, tmp_path):
    ids = build_set(repo, models, tmp_path)
    private = keys(repo, tmp_path, "alice")
    sign_set(repo, models, ids, private["alice"])
    api.promote(repo, ids["set"], "production", by=USER)
    args = ("--require-signed", "--keys", "alice", "--retry-after", "1")
    served = start_serve(str(repo.root), models["base"], tmp_path / "serve", *args)
    try:
        with served.client() as client:
            metrics = lambda: client.get("/metrics").text  # noqa: E731
            assert serving(metrics()) == ids["set"] and refusals(metrics()) == {}
            chat2 = api.commit(repo, "chat", models["a1"], "chat v2", author=USER).id
            set2 = api.set_commit(repo, ids["folder"] / "mol.toml", "v2", author=USER).id
            api.promote(repo, set2, "production", by=USER)
            wait_until(lambda: refusals(metrics()).get("unsigned", 0) >= 1, "no refusal")
            assert serving(metrics()) == ids["set"]
            answer = client.post("/v1/chat/completions", json={**BODY, "max_tokens": 2})
            assert answer.status_code == 200 and answer.json()["mint"]["set"] == ids["set"]
            # signed now: the follower tries again (after --retry-after) and swaps it in
            api.commit(repo, "chat", models["a1"], "v2", author=USER, sign=private["alice"])
            assert api.resolve(repo, "chat") == chat2
            mol = ids["folder"] / "mol.toml"
            assert api.set_commit(repo, mol, "v2", author=USER, sign=private["alice"]).signed
            wait_until(lambda: serving(metrics()) == set2, "the signed version never swapped in")
    finally:
        assert served.stop() == 0, served.output()[-3000:]
    log = served.output()
    assert f"staging set {set2[:12]} failed, still serving {ids['set'][:12]}" in log
    assert "it carries no signature" in log and "Traceback" not in log
    assert "(tried again in 1 s, or when the channel moves)" in log  # --retry-after


def test_a_runtime_judges_each_move_and_each_canary_before_it_fetches_anything(
    repo, models, tmp_path
):
    """In the process: the follower's poll and the canary's split go through the guard; an
    unsigned version is refused (counted, the holder still serving) by either door."""
    from mint.runtime.service import open_runtime

    ids = build_set(repo, models, tmp_path)
    private = keys(repo, tmp_path, "alice")
    sign_set(repo, models, ids, private["alice"])
    api.promote(repo, ids["set"], "production", by=USER)
    guard = SignatureGuard.open(repo, ["alice"])
    runtime = open_runtime(repo, "macaron@production", str(models["base"]), signatures=guard)
    try:
        api.commit(repo, "chat", models["a1"], "chat v2", author=USER)
        set2 = api.set_commit(repo, ids["folder"] / "mol.toml", "v2", author=USER).id
        api.canary_start(repo, "macaron@production", set2, 0.5, by=USER)
        assert runtime.poll_canary() is False and runtime.canary is None
        api.canary_stop(repo, "macaron@production", by=USER)
        api.promote(repo, set2, "production", by=USER)
        runtime.retry_after = 0  # judged again at once, not 10 s later
        assert runtime.poll() is False and runtime.active.id == ids["set"]
        assert runtime.metrics.signature_refusals == {"unsigned": 2}
        assert [r.ok for r in runtime.history[-2:]] == [False, False]
        assert "it carries no signature" in runtime.history[-1].error
    finally:
        runtime.close()


def test_a_version_resident_in_the_cpu_tier_is_judged_again_before_it_serves_again(
    repo, models, tmp_path
):
    """Rolled back to a version still loaded in the CPU tier, whose key is no longer trusted:
    refused (counted), and the holder keeps serving, though nothing had to be fetched."""
    from mint.runtime.service import open_runtime

    ids = build_set(repo, models, tmp_path)
    private = keys(repo, tmp_path, "alice", "bob")
    sign_set(repo, models, ids, private["alice"])
    api.promote(repo, ids["set"], "production", by=USER)
    runtime = open_runtime(
        repo,
        "macaron@production",
        str(models["base"]),
        signatures=SignatureGuard.open(repo),
        max_cpu_adapters=64,
    )
    try:
        api.commit(repo, "chat", models["a1"], "chat v2", author=USER, sign=private["bob"])
        mol = ids["folder"] / "mol.toml"
        set2 = api.set_commit(repo, mol, "v2", author=USER, sign=private["bob"]).id
        api.promote(repo, set2, "production", by=USER)
        assert runtime.poll() is True and runtime.active.id == set2
        assert ids["set"] in runtime.resident()  # set 1 waits in the CPU tier
        api.key_rm(repo, "alice")
        api.rollback(repo, "macaron@production", by=USER)
        runtime.retry_after = 0
        assert runtime.poll() is False and runtime.active.id == set2
        assert runtime.metrics.signature_refusals == {"not_verified": 1}
        assert "alice" in runtime.history[-1].error or "trusted" in runtime.history[-1].error
        assert ids["set"] in runtime.resident()  # refused, not unloaded
    finally:
        runtime.close()


# --- the vLLM plugin's source ---------------------------------------------------------------


def test_the_vllm_source_refuses_what_is_not_signed_and_caches_nothing(repo, models, tmp_path):
    api.base_add(repo, "tiny-llama", models["base"])
    private = keys(repo, tmp_path, "alice", "bob")
    first = api.commit(repo, "chat", models["a1"], "one", author=USER).id
    api.tag(repo, "v1", first, by=USER)
    cache = tmp_path / "cache"
    source = AdapterSource(repo, cache, require_signed=True, keys=("alice",))
    base = str(models["base"])
    for signer, expect in ((None, "it carries no signature"), ("bob", "not by alice")):
        if signer:
            api.commit(repo, "chat", models["a1"], "one", author=USER, sign=private[signer])
        with pytest.raises(NotVerified) as refused_:
            source.fetch(base, "chat@v1")
        assert expect in str(refused_.value) and "\n" not in str(refused_.value)
        assert not any(cache.iterdir())
    api.commit(repo, "chat", models["a1"], "one", author=USER, sign=private["alice"])
    fetched = source.fetch(base, "chat@v1")
    assert Path(fetched.path).parent == cache and (Path(fetched.path) / "model.sig").is_file()
    unsigned = api.commit(repo, "chat", models["a2"], "two", author=USER).id
    with pytest.raises(NotVerified):
        source.fetch(base, f"chat@{unsigned}")
    assert [p.name for p in cache.iterdir()] == [fetched.commit]
    assert AdapterSource(repo, tmp_path / "plain").fetch(base, f"chat@{unsigned}").commit


def test_the_vllm_source_reads_its_policy_from_the_environment(repo, tmp_path):
    env = {"MINT_REPO": str(repo.root), "MINT_VLLM_CACHE": str(tmp_path / "c")}
    plain = AdapterSource.from_env(env)
    assert (plain.require_signed, plain.keys) == (False, ())
    strict = AdapterSource.from_env(
        env | {"MINT_VLLM_REQUIRE_SIGNED": "1", "MINT_VLLM_KEYS": "bob, alice"}
    )
    assert (strict.require_signed, strict.keys) == (True, ("alice", "bob"))
    with pytest.raises(InvalidConfig, match="MINT_VLLM_KEYS needs MINT_VLLM_REQUIRE_SIGNED"):
        AdapterSource.from_env(env | {"MINT_VLLM_KEYS": "alice"})


def test_metrics_name_the_counter_even_before_any_refusal():
    from mint.runtime.metrics import Metrics

    m = Metrics()
    assert "# TYPE mint_signature_refusals_total counter" in m.render()
    m.signature_refused("unsigned")
    m.signature_refused("unsigned")
    assert refusals(m.render()) == {"unsigned": 2.0}
