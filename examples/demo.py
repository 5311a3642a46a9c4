"""`make demo`: mint's main job end to end, offline, on SQLite and a local store.

It trains a tiny Mixture-of-LoRA (a router and four specialists), versions it, gates it into
production on its routing accuracy, serves it over HTTP, pushes a degraded router through
the gate with --force, watches the served routes go wrong, and rolls back without a restart.
Every step runs the real `mint` command and shows what it printed.

    python -m mint.examples.demo [--keep DIR]

`--keep DIR` leaves the repository in DIR (a new or empty folder), ready for `mint status`,
`mint show macaron@production` and `mint serve macaron@production`: the base registered as
`tiny-llama`, the lines router, chat, agent, coding and ui tagged v1 (router also v2, the
degraded one), the set line macaron with production back on its first set, the contract
`production`, and beside it what the demo committed from: train/ (the base, the adapter
folders, the routing data train.jsonl and heldout.jsonl), macaron/ (mol.toml, route.md,
summary.md) and production.toml. Without it, everything goes in a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The set's mol.toml, {router} its router: with router@v1, as the README shows it and --keep
# leaves it (tests/test_demo_keep.py keeps the two the same); the demo's second set swaps in
# the degraded router@v2.
MOL = """name = "macaron"
protocol = "mol/1"
base = "tiny-llama"           # a registered base
[router]                      # the entry adapter: it picks one expert for each request
adapter = "{router}"         # any revision: a tag, a channel, a line (its head), a commit id
labels = ["chat", "agent", "coding", "ui"]
prompt = "route.md"           # beside mol.toml, versioned with the set
default = "chat"              # when the router cannot decide
[experts]
chat = "chat@v1"
agent = "agent@v1"
coding = "coding@v1"
ui = "ui@v1"
[summary]                     # summarizes each turn for the experts that did not answer it
adapter = "chat@v1"
prompt = "summary.md"
"""

CONTRACT = """name = "production"
channel = "production"
[[metric]]
name = "route_accuracy"
min = 0.97
"""


class Demo:
    def __init__(self, work: Path, repo: Path | None = None):
        self.work = work
        self.repo = repo or work / "project"

    def mint(
        self, *args: str, check: bool = True, show: bool = True, lines: int = 14
    ) -> tuple[int, str]:
        """Run the real CLI in this process; show the command and (the head of) its output."""
        from mint.cli import run_in_process

        shown = " ".join(shlex.quote(str(a).replace(str(self.work) + "/", "")) for a in args)
        code, out, err = run_in_process(["--repo", str(self.repo), *map(str, args)])
        if show:
            print(f"\n$ mint {shown}")
            body = (out + err).rstrip().splitlines()
            for line in body[:lines]:
                print(f"  {line}")
            if len(body) > lines:
                print(f"  ... ({len(body) - lines} more lines)")
            if code:
                print(f"  [exit status {code}]")
        if check and code != 0:
            raise SystemExit(f"demo: `mint {shown}` failed with exit status {code}")
        return code, out


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from mint.examples.tiny import quiet_libraries

    parser = argparse.ArgumentParser(prog="python -m mint.examples.demo", description=__doc__)
    parser.add_argument("--keep", type=Path, metavar="DIR", help="leave the repository in DIR")
    keep = parser.parse_args(argv).keep
    if keep is not None and keep.exists() and (not keep.is_dir() or any(keep.iterdir())):
        print(f"demo: {keep} is not an empty folder; choose another DIR", file=sys.stderr)
        return 1
    os.environ.setdefault("MINT_USER", "demo")
    quiet_libraries()
    started = time.perf_counter()
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        run_demo(Demo(keep.resolve(), repo=keep.resolve()))
        print(KEPT.format(dir=shlex.quote(str(keep))))
    else:
        with tempfile.TemporaryDirectory(prefix="mint-demo-") as tmp:
            run_demo(Demo(Path(tmp)))
    print(f"\ndemo finished in {time.perf_counter() - started:.0f} s")
    return 0


KEPT = """
The repository is in {dir}; try:
  cd {dir}
  mint status
  mint show macaron@production
  mint route-eval macaron@production --data train/heldout.jsonl
  mint serve macaron@production --port 8000"""


def run_demo(d: Demo) -> None:
    files = train(d)
    version(d, files)
    setdir = commit_set(d, files)
    gate(d, files)
    say("5. Serve macaron@production over HTTP (it follows the channel)")
    with Server(d, files.base) as server:
        before = server.sample(files.heldout_data)
        print(f"  served route accuracy on 40 held-out requests: {before:.2f}")
        force_a_degraded_router(d, files, setdir, server, before)
        roll_back(d, files, server)
    # the set production holds again, as the README shows it
    (setdir / "mol.toml").write_text(MOL.format(router="router@v1"))
    say("8. The audit trail, a byte-exact checkout, and fsck")
    d.mint("history", "macaron@production")
    d.mint("checkout", "macaron@production", d.work / "checkout")
    print("  " + " ".join(sorted(p.name for p in (d.work / "checkout").iterdir())))
    d.mint("status")
    d.mint("fsck")


def train(d: Demo):
    import torch

    from mint.examples.train import build_demo

    say("1. Train a tiny MoL offline: a router (L0) over chat/agent/coding/ui, four specialists")
    torch.set_num_threads(1)  # on two cores, one thread trains these tiny models fastest
    t = time.perf_counter()
    files = build_demo(d.work / "train")
    took = time.perf_counter() - t
    print(f"  trained in {took:.0f} s; held-out requests: {files.heldout_data.name}")
    return files


def version(d: Demo, files) -> None:
    say("2. Version every adapter: init, base, commit, log, show, tag")
    d.mint("init", d.repo)
    d.mint("base", "add", "tiny-llama", files.base)
    message = "router trained on 400 requests"
    d.mint("commit", "router", files.router, "-m", message, "--meta", "steps=200")
    for label, folder in files.experts.items():
        d.mint("commit", label, folder, "-m", f"{label} specialist", show=label == "chat")
        d.mint("tag", "v1", label, show=False)
    d.mint("tag", "v1", "router")
    d.mint("log", "router")
    d.mint("show", "router@v1", lines=12)


def commit_set(d: Demo, files) -> Path:
    say("3. Commit the set: every ref in mol.toml is pinned to a commit id")
    setdir = d.work / "macaron"
    setdir.mkdir()
    for src in (files.route_prompt, files.summary_prompt):
        (setdir / src.name).write_bytes(src.read_bytes())
    (setdir / "mol.toml").write_text(MOL.format(router="router@v1"))
    d.mint("set", "commit", setdir / "mol.toml", "-m", "macaron with router v1")
    d.mint("show", "macaron", lines=12)
    return setdir


def gate(d: Demo, files) -> None:
    say("4. Gate it into production on its routing accuracy")
    (d.work / "production.toml").write_text(CONTRACT)
    d.mint("contract", "add", d.work / "production.toml")
    d.mint("route-eval", "macaron", "--data", files.heldout_data, "--contract", "production")
    d.mint("promote", "macaron", "--to", "production")


def force_a_degraded_router(d: Demo, files, setdir: Path, server: Server, before: float) -> None:
    say("6. A degraded router: commit, diff, gate refuses, --force with a reason")
    message = "router retrained (labels mixed up)"
    d.mint("commit", "router", files.degraded_router, "-m", message)
    d.mint("tag", "v2", "router")
    d.mint("diff", "router@v1", "router@v2", lines=6)
    (setdir / "mol.toml").write_text(MOL.format(router="router@v2"))
    d.mint("set", "commit", setdir / "mol.toml", "-m", "macaron with router v2")
    d.mint("route-eval", "macaron", "--data", files.heldout_data, "--contract", "production")
    d.mint("gate", "macaron", "--to", "production", check=False)
    d.mint("promote", "macaron", "--to", "production", check=False)
    reason = "urgent: ship the new router"
    d.mint("promote", "macaron", "--to", "production", "--force", "--reason", reason)
    server.wait_for(d.mint("show", "macaron@production", "--json", show=False)[1])
    after = server.sample(files.heldout_data)
    print(f"  served route accuracy after the forced promote: {after:.2f} (was {before:.2f})")


def roll_back(d: Demo, files, server: Server) -> None:
    say("7. Roll back production; the server follows without a restart")
    d.mint("rollback", "macaron@production", "--reason", "router v2 misroutes coding and ui")
    server.wait_for(d.mint("show", "macaron@production", "--json", show=False)[1])
    print(f"  served route accuracy after the rollback: {server.sample(files.heldout_data):.2f}")
    pid, failures = server.proc.pid, server.failures
    print(f"  the server process is the same one (pid {pid}); requests failed: {failures}")


class Server:
    """`mint serve macaron@production` in its own process, and a small client for it."""

    def __init__(self, demo: Demo, base: Path):
        self.demo, self.base = demo, base
        self.failures = 0

    def __enter__(self) -> Server:
        import httpx

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        repo, base, port = str(self.demo.repo), str(self.base), str(self.port)
        args = ["--repo", repo, "serve", "macaron@production", "--base-dir", base, "--port", port]
        print(f"\n$ mint serve macaron@production --base-dir {self.base.name} --port {port} &")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mint", *args], stderr=subprocess.PIPE, text=True
        )
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"demo: the server exited: {self.proc.stderr.read()}")
            try:
                health = self.client.get("/healthz").json()
                print(f"  /healthz: {json.dumps(health)}")
                return self
            except httpx.HTTPError:
                time.sleep(0.3)
        raise SystemExit("demo: the server did not start within 120 s")

    def __exit__(self, *exc) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def ask(self, text: str) -> dict:
        body = {
            "model": "macaron",
            "messages": [{"role": "user", "content": text}],
            "max_tokens": 8,
        }
        r = self.client.post("/v1/chat/completions", json=body)
        if r.status_code != 200:
            self.failures += 1
        r.raise_for_status()
        return r.json()

    def sample(self, heldout: Path, n: int = 40) -> float:
        """Send N held-out requests; print the first four; return the share routed right."""
        records = [json.loads(l) for l in heldout.read_text().splitlines()[:n]]
        right = 0
        for i, rec in enumerate(records):
            text = rec["messages"][-1]["content"]
            reply = self.ask(text)
            route = reply["mint"]["route"]
            right += route == rec["label"]
            if i < 4:
                answer = reply["choices"][0]["message"]["content"]
                served = reply["mint"]["set"][:12]
                print(
                    f"  [{rec['label']:>6} -> {route:<6}] {text!r} => {answer!r}  (set {served})"
                )
        return right / len(records)

    def wait_for(self, show_json: str, timeout: float = 10.0) -> None:
        """Wait until /healthz serves the channel's commit; print how long the swap took."""
        target = json.loads(show_json)["id"]
        t = time.perf_counter()
        while time.perf_counter() - t < timeout:
            health = self.client.get("/healthz").json()
            if target in json.dumps(health):
                took = time.perf_counter() - t
                print(f"  the server now serves {target[:12]} (after {took:.1f} s, no restart)")
                return
            time.sleep(0.1)
        raise SystemExit(
            f"demo: the server did not follow the channel to {target[:12]} within {timeout} s"
        )


if __name__ == "__main__":
    sys.exit(main())
