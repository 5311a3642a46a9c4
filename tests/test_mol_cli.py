"""The MoL flow through the real CLI on both databases: sets, route-eval and the gate,
`mint serve` following a channel in its own process, hot rollback under load, export."""

import datetime as dt
import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from mint import api
from mint.errors import BlobCorrupt
from mint.examples.demo import MOL
from mint.runtime.service import open_runtime

from conftest import one_line_error
from support import forkserver, free_port
from support.runtime import ask_until, demo, random_router


@pytest.fixture
def mol(mint, repo, tmp_path, tmp_path_factory):
    """The trained demo committed: adapters, three routers, a set per router. Returns ids."""
    files = demo(tmp_path_factory)
    assert mint("base", "add", "tiny-llama", files.base).code == 0
    for label, folder in files.experts.items():
        assert mint("commit", label, folder, "-m", label).code == 0
        assert mint("tag", "v1", label).code == 0
    routers = {"good": files.router, "degraded": files.degraded_router, "random": random_router()}
    folder = tmp_path / "set"
    folder.mkdir()
    for src in (files.route_prompt, files.summary_prompt):
        (folder / src.name).write_bytes(src.read_bytes())
    sets = {}
    for name, path in routers.items():
        router = mint("commit", "router", path, "-m", name, "--json").json()["id"]
        (folder / "mol.toml").write_text(MOL.format(router=router))
        sets[name] = mint("set", "commit", folder / "mol.toml", "-m", name, "--json").json()["id"]
    (tmp_path / "prod.toml").write_text(
        'name = "prod"\nchannel = "production"\n[[metric]]\nname = "route_accuracy"\nmin = 0.97\n'
    )
    assert mint("contract", "add", tmp_path / "prod.toml").code == 0
    return mint, sets, files, folder


def test_route_eval_gates_the_set(mol, repo):
    mint, sets, files, _ = mol
    good = mint(
        "route-eval", sets["good"], "--data", files.heldout_data, "--contract", "prod", "--json"
    )
    assert good.code == 0, good
    r = good.json()
    assert r["accuracy"] >= 0.97 and r["n"] == 200
    assert sum(r["confusion"]["coding"].values()) == 50
    assert r["evaluation"]["metrics"] == {"route_accuracy": r["accuracy"]}
    assert r["evaluation"]["data_hash"]
    assert mint("promote", sets["good"], "--to", "production").code == 0

    rnd = mint(
        "route-eval", sets["random"], "--data", files.heldout_data, "--contract", "prod", "--json"
    ).json()
    assert rnd["accuracy"] < 0.97
    refused = mint("promote", sets["random"], "--to", "production")
    assert refused.code == 3 and "route_accuracy" in refused.out
    assert api.resolve(repo, "macaron@production") == sets["good"]
    assert (
        mint("rollback", "macaron@production").code != 0
    )  # one holder only: nothing to go back to
    hist = mint("history", "macaron@production", "--json").json()
    assert [h["to"] for h in hist] == [sets["good"]] and hist[0]["evaluations"] == [
        r["evaluation"]["id"]
    ]


def test_route_eval_bad_data_and_the_base_dir_option(mol, tmp_path):
    mint, sets, files, _ = mol
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [], "label": "chat"}\nnot json\n')
    one_line_error(mint("route-eval", sets["good"], "--data", bad), "not JSON")
    one_line_error(mint("route-eval", "chat", "--data", bad), "not a set")
    # the base folder is --base-dir; --base, its old name, still works but is not shown
    for flag in ("--base-dir", "--base"):  # the data are read first, so both fail on them
        one_line_error(mint("route-eval", "macaron", "--data", bad, flag, files.base), "JSON")
    both = ("--base", files.base, "--base-dir", tmp_path)
    one_line_error(mint("route-eval", "macaron", "--data", bad, *both), "--base-dir", code=2)
    for command in ("serve", "route-eval"):
        shown = mint(command, "--help").out
        assert "--base-dir" in shown and "--base " not in shown


def test_export_vllm_and_peft(mol, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    mint, sets, files, _ = mol
    out = tmp_path / "vllm"
    r = mint("export", sets["good"], out, "--format", "vllm", "--json")
    assert r.code == 0, r
    modules = json.loads((out / "lora-modules.json").read_text())
    assert {m["name"] for m in modules} == {"chat", "agent", "coding", "ui", "router", "summary"}
    assert all((out / m["name"] / "adapter_model.safetensors").exists() for m in modules)
    router = json.loads((out / "router.json").read_text())
    assert router["structured_outputs"] == {"choice": ["chat", "agent", "coding", "ui"]}
    assert router["prefill"] == "model_id=" and router["commit"] == sets["good"]
    assert "--lora-modules" in (out / "serve-vllm.sh").read_text()
    base = AutoModelForCausalLM.from_pretrained(files.base)
    PeftModel.from_pretrained(base, out / "coding")  # a plain PEFT folder
    assert mint("export", "chat", tmp_path / "peft", "--format", "peft").code == 0
    assert (tmp_path / "peft" / "adapter_config.json").exists()
    one_line_error(mint("export", "chat", tmp_path / "x", "--format", "onnx"), "onnx")


class Served:
    """`mint serve macaron@canary` in its own process (forked warm: support.forkserver)."""

    def __init__(self, repo_root, base):
        self.port = free_port()
        self.log = Path(repo_root).parent / f"serve-{self.port}.log"
        argv = ["--repo", str(repo_root), "serve", "macaron@canary", "--base-dir", str(base)]
        argv += ["--port", str(self.port), "--poll", "0.2"]
        self.proc = forkserver.spawn(argv, warm="serve", env=dict(os.environ), log=self.log)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 120  # a liveness limit, not a timing assertion
        with httpx.Client() as probe:
            while time.time() < deadline:
                assert self.proc.poll() is None, self.log.read_text()
                try:
                    probe.get(self.url + "/healthz").raise_for_status()
                    return
                except httpx.HTTPError:
                    time.sleep(0.2)
        raise AssertionError("server did not start")

    def serving(self) -> str:
        return httpx.get(self.url + "/healthz").json()["commit"]

    def wait_for(self, commit: str) -> None:
        deadline = time.time() + 60
        while self.serving() != commit:
            assert time.time() < deadline, f"server never followed to {commit[:12]}"
            time.sleep(0.05)

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=30)


def test_serve_follows_the_channel_under_load(mol, repo):
    mint, sets, files, _ = mol
    order = [sets["good"], sets["degraded"], sets["random"]]
    assert mint("promote", order[0], "--to", "canary").code == 0
    server = Served(repo.root, files.base)
    results, stop = [], threading.Event()
    threads = [
        threading.Thread(
            target=ask_until,
            args=(server.url, stop, results, "python bug fix"),
            kwargs={"max_tokens": 4},
        )
        for _ in range(2)
    ]
    try:
        for t in threads:
            t.start()
        for i in range(20):  # promote, rollback, promote, rollback, ...
            if i % 2 == 0:
                assert mint("promote", order[1 + (i // 2) % 2], "--to", "canary").code == 0
            else:
                assert mint("rollback", "macaron@canary").code == 0
            server.wait_for(api.resolve(repo, "macaron@canary"))
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join()
        server.stop()
    failed = [r for r in results if r[2] != 200]
    assert results and not failed, failed[:3]
    hist = api.history(repo, "macaron@canary")
    assert len(hist) == 21 and [m.action for m in hist[1:3]] == ["promote", "rollback"]
    moves = [(dt.datetime.fromisoformat(m.at).timestamp(), m.to) for m in hist]
    for started, finished, _, body in results:
        # The holder when the request started, or the one just before it while the server
        # was following (it swaps between requests, within one poll of the move), or one
        # that took the channel while the request was on its way to the server.
        held = [to for at, to in moves if at <= started][-2:]
        held += [to for at, to in moves if started < at <= finished]
        assert body["mint"]["set"] in held, (started, body["mint"]["set"][:12])
    assert {body["mint"]["set"] for _, _, _, body in results} >= {sets["good"], sets["degraded"]}


def flip_bytes(repo, blob: str) -> None:
    """Change a stored blob in place (it is read-only in the store), as bit rot would."""
    path = repo.store.local_path(blob)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-8:] = bytes(b ^ 0x01 for b in data[-8:])  # a prompt still reads as text
    path.write_bytes(bytes(data))


def test_corrupt_staged_version_never_serves(mol, repo):
    mint, sets, files, _ = mol
    assert mint("promote", sets["good"], "--to", "canary").code == 0
    server = Served(repo.root, files.base)
    try:
        router = api.show(repo, sets["degraded"]).members[0].commit_id
        flip_bytes(repo, api.show(repo, router).files["adapter_model.safetensors"].sha256)
        assert mint("promote", sets["degraded"], "--to", "canary").code == 0
        deadline = time.time() + 60
        while httpx.get(server.url + "/healthz").json()["failed_swaps"] == 0:
            assert time.time() < deadline, "the server never tried the corrupt version"
            time.sleep(0.1)
        assert server.serving() == sets["good"]
        assert "mint_swaps_failed_total 1" in httpx.get(server.url + "/metrics").text
        message = {"role": "user", "content": "hello friend"}
        r = httpx.post(
            server.url + "/v1/chat/completions",
            json={"model": "macaron", "max_tokens": 4, "messages": [message]},
        )
        assert r.status_code == 200 and r.json()["mint"]["set"] == sets["good"]
        bad = httpx.post(server.url + "/v1/chat/completions", content=b"{not json")
        assert bad.status_code == 400 and "error" in bad.json()
        assert server.serving() == sets["good"]
    finally:
        server.stop()


def test_a_set_whose_route_prompt_is_corrupt_never_serves(mol, repo, tmp_path):
    mint, sets, files, folder = mol
    # a version with a route prompt of its own, so that corrupting it touches no other set
    (folder / "route.md").write_text(files.route_prompt.read_text() + "route the turn .\n")
    reworded = mint("set", "commit", folder / "mol.toml", "-m", "reworded", "--json").json()["id"]
    staged_before = api.set_spec(repo, reworded)
    assert mint("promote", sets["good"], "--to", "canary").code == 0
    runtime = open_runtime(repo, "macaron@canary", str(files.base), poll_interval=0.05)
    try:
        flip_bytes(repo, api.show(repo, reworded).files["route.md"].sha256)
        assert mint("promote", reworded, "--to", "canary").code == 0
        runtime.follow()
        deadline = time.time() + 60
        while runtime.metrics.failed_swaps < 1:
            assert time.time() < deadline, "the runtime never tried the corrupt version"
            time.sleep(0.05)
        with pytest.raises(BlobCorrupt):
            runtime.stage(staged_before)  # its text was read before the damage: still refused
        assert runtime.active.id == sets["good"] and runtime.staged is None
        assert runtime.turn([{"role": "user", "content": "fix python bug"}]).set_id == sets["good"]
    finally:
        runtime.close()
    port = free_port()
    argv = ["--repo", str(repo.root), "serve", reworded, "--base-dir", str(files.base)]
    log = repo.root.parent / "corrupt-serve.log"  # stdout and stderr: one line in all
    served = forkserver.spawn(
        [*argv, "--port", str(port)], warm="serve", env=dict(os.environ), log=log
    )
    assert served.wait(120) == 1, log.read_text()
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1 and "corrupt" in lines[0] and "Traceback" not in lines[0], lines


def test_tiny_gives_a_newcomer_a_base_and_adapters_to_commit(mint, repo, tmp_path, capsys):
    from mint.examples import tiny

    play = tmp_path / "play"
    assert tiny.main([str(play)]) == 0
    printed = capsys.readouterr().out
    assert f"cd {play}\n  mint init" in printed  # then names in it, as the README's tour does
    assert "mint base add tiny-llama tiny-llama" in printed
    assert 'mint commit chat adapter-a -m "first"' in printed
    assert mint("base", "add", "tiny-llama", play / "tiny-llama").code == 0
    first = mint("commit", "chat", play / "adapter-a", "-m", "first", "--json")
    second = mint("commit", "chat", play / "adapter-b", "-m", "second", "--json")
    assert first.code == 0 and second.code == 0, (first, second)
    assert [c.id for c in api.log(repo, "chat")] == [second.json()["id"], first.json()["id"]]
    assert mint("diff", "chat~1", "chat").code == 0
    assert tiny.main([str(play)]) == 1  # it never writes over a folder
