#!/usr/bin/env python
"""The demo MoL served by the embedded engine and by vLLM, side by side (issue 21).

Figures, measured in one run on the same repository, set and clients:
  * throughput (completed turns/s) and p50/p95 latency of a turn (HTTP included, as a client
    sees it) at 16 concurrent clients whose routed requests spread over the four experts:
    `open_runtime(repo, "macaron@production")` (PEFT in this process) against
    `open_runtime(..., engine_url=URL)` over a vLLM server with mint's plugin. Each engine is
    measured --reps times, alternating which goes first, after a warm-up; min/median/max over
    the repetitions, and the ratio vLLM/embedded of the medians.
  * the time from `api.promote` (or `api.rollback`) of macaron@production returning to the first
    answer from the new set (its `mint.set`), under continuous load of 4 clients, one engine
    at a time (the other neither loaded nor following), each starting from the good set; and
    when the runtime's active engine switched (it polls the repository every 0.5 s, as `mint
    serve` does). The first move, to the degraded router, is shown apart: on vLLM its router
    is not yet loaded then, so the plugin fetches, verifies and loads it while it is staged.
  * vLLM alone: a client asking for `chat@production` back to back while the channel moves;
    the time from the move to the first answer named `chat@<new commit>` (the plugin polls a
    local repository every second, retires the name, and resolves it anew).

The base is the vLLM-compatible demo (hidden 128, two heads of 64); vLLM runs float32 with
--max-model-len 256 on the CPU, its threads bound to cores 0-1, as `make test-vllm` runs it.
Traces are off on both sides (the figure compares engines, not the trace store). Both front
ends run in this process (`ServerThread`), the vLLM server in its own process group
(`mint.runtime.vllm_server.launch`, as `mint serve --engine vllm` starts one); the
embedded engine runs torch on one thread (--threads), which on a shared two-core machine is
much faster than two. Each measured load waits 2 s first, since vLLM keeps a core busy for
about a second after a burst; the table shows how much CPU the idle vLLM server still used
while the embedded engine was measured.

This script needs vLLM's environment (vLLM, torch, transformers, peft, mint). Started from
another Python (`make bench`), it runs itself again with MINT_VLLM_PYTHON, else
~/.cache/mint/vllm-venv/bin/python (what `make test-vllm` installs), and prints "skipped: vLLM
not installed" when there is none.

    python bench/bench_vllm.py [--reps 5] [--requests 64] [--clients 16] [--moves 7]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common as c  # noqa: E402

# The checkout's own folder would hide a mint installed as a user installs it (`make
# test-vllm` does): its `mint/` lacks mint.store and mint.runtime, which only exist once
# installed. tests/ stays on the path, for the tests' helpers.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != str(c.REPO_ROOT)]

ME = "bench"
ENGINES = ("embedded", "vllm")
VLLM_START = 600.0  # seconds: a liveness limit for a cold start on a busy machine
SKIPPED = "skipped: vLLM not installed"
SETTLE = 2.0  # seconds of quiet before each measured load: vLLM stays busy ~1 s after a burst


# --- the repository ---------------------------------------------------------------------------


def build_repository(root: Path):
    """The demo MoL (a base vLLM accepts) committed into a new repository: the experts tagged
    v1, two versions of the set `macaron` (trained router, degraded router), the first on
    macaron@production; chat@production on chat v1, and a second commit on `chat` for it to
    move to. Returns (repo, {"good", "degraded": set ids, "chat", "chat2": commits}, files)."""
    from mint import api
    from mint.examples import train

    from support.runtime import commit_demo

    files = train.build_demo(root / "demo", hidden=128, heads=2)
    repo, _ = api.init(root / "repo")
    routers = {"good": files.router, "degraded": files.degraded_router}
    ids = commit_demo(repo, files, root / "set", routers, by=ME)
    sets = {name: got["set"] for name, got in ids.items()}
    api.promote(repo, sets["good"], "production", by=ME)
    sets["chat"] = api.resolve(repo, "chat@v1")
    api.promote(repo, sets["chat"], "production", by=ME)
    sets["chat2"] = api.commit(repo, "chat", files.experts["agent"], "chat v2", author=ME).id
    return repo, sets, files


# --- the vLLM server --------------------------------------------------------------------------


def start_vllm(base_dir: Path, repo_root: Path, folder: Path):
    """`mint.runtime.vllm_server.launch` (what `mint serve --engine vllm` starts) on the base,
    with mint's plugin over the repository at REPO_ROOT, as `make test-vllm` runs it: float32,
    --max-model-len 256, its threads on cores 0-1. Returns (server, seconds until ready)."""
    from mint.runtime.vllm_server import launch

    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0-1"),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "MINT_REPO": str(repo_root),
        "MINT_VLLM_CACHE": str(folder / "adapters"),
    }
    args = ["--dtype", "float32", "--max-model-len", "256"]
    t0 = time.perf_counter()
    server = launch(base_dir, env=env, args=args, folder=folder, timeout=VLLM_START)
    return server, time.perf_counter() - t0


# --- clients ----------------------------------------------------------------------------------


def client_requests(clients: int, turns: int, seed: int = 0) -> list[list[dict]]:
    """`turns` routed requests per client, their topics spread over the four experts."""
    import random

    from mint.examples import train

    rng, labels = random.Random(seed), train.LABELS
    return [
        [
            {
                "model": "macaron",
                "messages": [
                    {
                        "role": "user",
                        "content": train.synthetic_request(labels[(k + i) % len(labels)], rng),
                    }
                ],
            }
            for i in range(turns)
        ]
        for k in range(clients)
    ]


class Steady:
    """CLIENTS clients asking URL one turn after another until stopped; keeps when each answer
    arrived and which set version gave it."""

    def __init__(self, url: str, clients: int):
        self.url, self.answers, self.failed = url, [], 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        bodies = client_requests(clients, 8, seed=1)
        self._threads = [
            threading.Thread(target=self._client, args=(b,), daemon=True) for b in bodies
        ]
        for thread in self._threads:
            thread.start()

    def _client(self, bodies: list[dict]) -> None:
        import httpx

        with httpx.Client(base_url=self.url, timeout=300) as http:
            i = 0
            while not self._stop.is_set():
                try:
                    response = http.post("/v1/chat/completions", json=bodies[i % len(bodies)])
                    ok = response.status_code == 200
                except httpx.HTTPError:
                    ok = False
                now = time.perf_counter()
                with self._lock:
                    if ok:
                        self.answers.append((now, response.json()["mint"]["set"]))
                    else:
                        self.failed += 1
                i += 1

    def first_from(self, set_id: str, after: float) -> float | None:
        """When the first answer from SET_ID arrived after AFTER (None: not yet)."""
        with self._lock:
            times = [t for t, got in self.answers if got == set_id and t >= after]
        return min(times) if times else None

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


# --- figures ----------------------------------------------------------------------------------


def bench_throughput(
    urls: dict[str, str], reps: int, clients: int, requests: int, vllm_pgid: int
) -> dict:
    """Turns/s and latency percentiles of each engine, REPS times, alternating the order.
    Also how busy the idle vLLM server kept the CPU while the embedded engine ran (cores)."""
    turns = max(1, requests // clients)
    bodies = client_requests(clients, turns)
    for url in urls.values():  # warm-up, not counted: one turn per client
        c.chat_load(url, [row[:1] for row in bodies])
    rates: dict[str, list[float]] = {e: [] for e in urls}
    p50s: dict[str, list[float]] = {e: [] for e in urls}
    p95s: dict[str, list[float]] = {e: [] for e in urls}
    failed = dict.fromkeys(urls, 0)
    routes: dict[str, dict[str, int]] = {e: {} for e in urls}
    idle: list[float] = []
    for rep in range(reps):
        order = list(urls) if rep % 2 == 0 else list(reversed(urls))
        for engine in order:
            time.sleep(SETTLE)
            cpu = group_cpu_seconds(vllm_pgid)
            seconds, latencies, bad, got = c.chat_load(urls[engine], bodies)
            for route, count in got.items():
                routes[engine][route] = routes[engine].get(route, 0) + count
            if engine == "embedded":
                idle.append((group_cpu_seconds(vllm_pgid) - cpu) / seconds)
            rates[engine].append(clients * turns / seconds)
            p50s[engine].append(percentile(latencies, 50))
            p95s[engine].append(percentile(latencies, 95))
            failed[engine] += bad
            print(
                f"  rep {rep + 1}/{reps} {engine:8}: {clients * turns / seconds:6.2f} turns/s, "
                f"p50 {percentile(latencies, 50) * 1000:.0f} ms, "
                f"p95 {percentile(latencies, 95) * 1000:.0f} ms, failed {bad}",
                flush=True,
            )
    out = {
        "clients": clients,
        "turns_per_rep": clients * turns,
        "reps": reps,
        "vllm_idle_cores": c.median(idle),
    }
    for engine in urls:
        out[engine] = {
            "turns_per_s": spread(rates[engine]),
            "p50_s": spread(p50s[engine]),
            "p95_s": spread(p95s[engine]),
            "failed": failed[engine],
            "routes": routes[engine],
        }
    return out


def bench_moves(runtimes: dict, urls: dict[str, str], repo, sets: dict, moves: int) -> dict:
    """For each engine in turn (the other one idle and not following): promote and roll back
    macaron@production MOVES times under 4 steady clients; for each move, when the runtime's
    active engine named the new set, and when the first answer from it arrived (seconds
    after the move returned)."""
    from mint import api

    for runtime in runtimes.values():
        runtime.stop()
    out: dict = {"moves": moves, "clients": 4}
    for engine, runtime in runtimes.items():
        if api.resolve(repo, "macaron@production") != sets["good"]:  # each starts from good
            api.promote(repo, sets["good"], "production", by=ME)
        runtime.follow()
        settle(runtime, sets["good"])
        steady = Steady(urls[engine], 4)
        switched, answered = [], []
        try:
            time.sleep(1.0)
            for i in range(moves):
                if api.resolve(repo, "macaron@production") == sets["good"]:
                    api.promote(repo, sets["degraded"], "production", by=ME)
                    new, how = sets["degraded"], "promote"
                else:
                    api.rollback(repo, "macaron@production", by=ME, reason="bench")
                    new, how = sets["good"], "rollback"
                t0 = time.perf_counter()
                seen = first = None
                while first is None and time.perf_counter() < t0 + 120:
                    active = runtime.active
                    if seen is None and active is not None and active.id == new:
                        seen = time.perf_counter() - t0
                    got = steady.first_from(new, t0)
                    first = None if got is None else got - t0
                    time.sleep(0.005)
                switched.append(float("nan") if seen is None else seen)
                answered.append(float("nan") if first is None else first)
                print(
                    f"  {engine:8} move {i + 1}/{moves} ({how}): switched "
                    f"{_ms(switched[-1])}, first answer {_ms(answered[-1])}",
                    flush=True,
                )
                time.sleep(1.0)
        finally:
            steady.stop()
            runtime.stop()
        out[engine] = {
            "first_move_s": answered[0],
            "first_move_switch_s": switched[0],
            "switch_s": spread(switched[1:]),
            "answer_s": spread(answered[1:]),
            "all_answer_s": answered,
            "failed": steady.failed,
            "answers": len(steady.answers),
        }
    return out


def bench_plugin_follow(url: str, repo, ids: dict, moves: int) -> dict:
    """vLLM alone, a client asking for `chat@production` one request after another: seconds
    from each promote or rollback of chat@production returning to the first answer named
    `chat@<new commit>` (the plugin follows the channel, retires the name, resolves it anew)."""
    import httpx

    from mint import api

    body = {"model": "chat@production", "prompt": "user: hello\nassistant:", "max_tokens": 1}
    took: list[float] = []
    with httpx.Client(base_url=url, timeout=120) as http:
        http.post("/v1/completions", json=body).raise_for_status()  # resolved and followed
        for i in range(moves):
            if i % 2 == 0:
                api.promote(repo, ids["chat2"], "production", by=ME)
                new = ids["chat2"]
            else:
                api.rollback(repo, "chat@production", by=ME, reason="bench")
                new = ids["chat"]
            t0 = time.perf_counter()
            while time.perf_counter() < t0 + 120:
                got = http.post("/v1/completions", json=body)
                if got.status_code == 200 and got.json()["model"] == f"chat@{new}":
                    break
            took.append(time.perf_counter() - t0)
            print(f"  chat@production move {i + 1}/{moves}: {_ms(took[-1])}", flush=True)
    return {"moves": moves, "answer_s": spread(took)}


def settle(runtime, commit: str, timeout: float = 120.0) -> None:
    """Wait until RUNTIME serves COMMIT (a runtime that was not following catches up)."""
    deadline = time.monotonic() + timeout
    while (runtime.active is None or runtime.active.id != commit) and time.monotonic() < deadline:
        time.sleep(0.05)


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user and system) used so far by the live processes of group PGID."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def spread(values: list[float]) -> dict:
    got = [v for v in values if v == v]
    if not got:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan"), "n": 0}
    return {"min": min(got), "median": statistics.median(got), "max": max(got), "n": len(got)}


def percentile(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


# --- the run ----------------------------------------------------------------------------------


def measure(args) -> dict:
    import torch

    from mint.examples.tiny import quiet_libraries
    from mint.runtime.server import ServerThread
    from mint.runtime.service import open_runtime

    quiet_libraries()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="mint-bench-vllm-", dir=args.tmp) as tmp:
        root = Path(tmp)
        torch.set_num_threads(1)  # on two cores, one thread trains these tiny models fastest
        t0 = time.perf_counter()
        repo, sets, files = build_repository(root)
        built = time.perf_counter() - t0
        print(f"demo trained and committed in {built:.0f} s", flush=True)
        torch.set_num_threads(args.threads)
        server, started = start_vllm(files.base, repo.root, root / "vllm")
        runtimes: dict = {}
        threads: list[ServerThread] = []
        try:
            print(f"vLLM ready in {started:.0f} s at {server.url}", flush=True)
            t1 = time.perf_counter()
            runtimes["embedded"] = open_runtime(
                repo, "macaron@production", str(files.base), traces=False
            )
            opened = {"embedded": time.perf_counter() - t1}
            t1 = time.perf_counter()
            runtimes["vllm"] = open_runtime(
                repo, "macaron@production", str(files.base), traces=False, engine_url=server.url
            )
            opened["vllm"] = time.perf_counter() - t1
            urls = {}
            for engine in ENGINES:
                threads.append(ServerThread(runtimes[engine], log_level="error"))
                urls[engine] = threads[-1].start()
                runtimes[engine].follow()
            print("throughput:", flush=True)
            throughput = bench_throughput(
                urls, args.reps, args.clients, args.requests, server.process.pid
            )
            print("promote/rollback to the first answer from the new set:", flush=True)
            moves = bench_moves(runtimes, urls, repo, sets, args.moves)
            print("vLLM alone, model=chat@production, to the first answer from the new commit:")
            moves["plugin"] = bench_plugin_follow(server.url, repo, sets, args.moves - 1)
        finally:
            for thread in threads:
                thread.stop()
            for runtime in runtimes.values():
                runtime.close()
            server.stop()
            repo.close()
    return {
        "build_s": built,
        "vllm_ready_s": started,
        "open_s": opened,
        "torch_threads": args.threads,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "throughput": throughput,
        "moves": moves,
    }


def _ms(seconds: float) -> str:
    return c.fmt_num(seconds * 1000, " ms")


def _routes(counts: dict) -> str:
    names = ("chat", "agent", "coding", "ui")
    return "/".join(str(counts.get(n, 0)) for n in names) + f", {counts.get('fallback', 0)}"


def _mmm(d: dict, fmt) -> str:
    return f"{fmt(d['min'])} / {fmt(d['median'])} / {fmt(d['max'])}"


def report(results: dict) -> str:
    if results.get("skipped"):
        return f"vLLM vs embedded: skipped: {results['skipped']}"
    t, m = results["throughput"], results["moves"]
    emb, vll = t["embedded"], t["vllm"]

    def rate(v: float) -> str:
        return f"{v:.2f}"

    rows = [
        [
            f"turns/s, {t['clients']} clients over 4 experts",
            _mmm(emb["turns_per_s"], rate),
            _mmm(vll["turns_per_s"], rate),
            f"{vll['turns_per_s']['median'] / emb['turns_per_s']['median']:.2f}x",
        ],
        [
            "p50 latency of a turn",
            _mmm(emb["p50_s"], _ms),
            _mmm(vll["p50_s"], _ms),
            f"{vll['p50_s']['median'] / emb['p50_s']['median']:.2f}x",
        ],
        [
            "p95 latency of a turn",
            _mmm(emb["p95_s"], _ms),
            _mmm(vll["p95_s"], _ms),
            f"{vll['p95_s']['median'] / emb['p95_s']['median']:.2f}x",
        ],
        ["failed requests", str(emb["failed"]), str(vll["failed"]), "-"],
        [
            "turns routed to chat/agent/coding/ui, fallback",
            _routes(emb["routes"]),
            _routes(vll["routes"]),
            "-",
        ],
        [
            "CPU cores the idle vLLM server used meanwhile",
            f"{t['vllm_idle_cores']:.2f}",
            "-",
            "-",
        ],
    ]
    title = (
        f"Serving the demo MoL (hidden 128), {t['reps']} reps x {t['turns_per_rep']} turns: "
        "embedded vs vLLM (min / median / max)"
    )
    out = [c.table(title, ["figure", "embedded", "vLLM", "vLLM/embedded"], rows)]
    me, mv = m["embedded"], m["vllm"]
    rows = [
        [
            "promote/rollback -> first answer from the new set",
            _mmm(me["answer_s"], _ms),
            _mmm(mv["answer_s"], _ms),
        ],
        [
            "promote/rollback -> runtime switched",
            _mmm(me["switch_s"], _ms),
            _mmm(mv["switch_s"], _ms),
        ],
        [
            "first move (new router not yet on vLLM) -> first answer",
            _ms(me["first_move_s"]),
            _ms(mv["first_move_s"]),
        ],
        [
            "vLLM alone: move of chat@production -> first answer as chat@<new commit>",
            "-",
            _mmm(m["plugin"]["answer_s"], _ms),
        ],
        [
            "answers / failed requests during the moves",
            f"{me['answers']} / {me['failed']}",
            f"{mv['answers']} / {mv['failed']}",
        ],
    ]
    title = (
        f"Following macaron@production: {m['moves'] - 1} moves after the first, "
        f"{m['clients']} steady clients, one engine at a time, poll 0.5 s (min / median / max)"
    )
    out.append(c.table(title, ["figure", "embedded", "vLLM"], rows))
    before, after = (
        ", ".join(f"{x:.2f}" for x in results[k]) for k in ("load_before", "load_after")
    )
    out.append(
        f"(demo built in {results['build_s']:.0f} s; "
        f"vLLM ready in {results['vllm_ready_s']:.0f} s; "
        f"set opened: embedded {results['open_s']['embedded']:.1f} s, vLLM "
        f"{results['open_s']['vllm']:.1f} s; torch threads here {results['torch_threads']};"
        f" load average before the run {before}, after it {after})"
    )
    return "\n\n".join(out)


def vllm_python() -> Path | None:
    """vLLM's Python: MINT_VLLM_PYTHON, else the environment `make test-vllm` installs."""
    where = os.environ.get("MINT_VLLM_PYTHON") or (
        Path.home() / ".cache" / "mint" / "vllm-venv" / "bin" / "python"
    )
    path = Path(where)
    if not path.exists():
        return None
    probe = subprocess.run([str(path), "-c", "import vllm"], capture_output=True)
    return path if probe.returncode == 0 else None


def elsewhere(argv: list[str]) -> dict:
    """Run this script with vLLM's Python (this one has no vLLM); its results, or skipped."""
    python = vllm_python()
    if python is None:
        print(SKIPPED, flush=True)
        return {"skipped": "vLLM not installed"}
    done = subprocess.run([str(python), __file__, *argv])
    if done.returncode != 0:
        return {"skipped": f"the run with {python} failed ({done.returncode})"}
    return json.loads((c.OUT_DIR / "bench_vllm.json").read_text())


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--reps", type=int, default=5, help="repetitions of each engine's load")
    p.add_argument("--requests", type=int, default=64, help="turns per repetition and engine")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--moves", type=int, default=7, help="promotes and rollbacks, in turn")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the embedded engine (1: on a shared two-core machine, two "
        "threads collapse when anything else runs)",
    )
    p.add_argument("--tmp", default=os.environ.get("MINT_BENCH_TMP"), help="scratch folder")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if importlib.util.find_spec("vllm") is None:
        return elsewhere(argv)
    results = measure(args)
    print()
    print(report(results))
    c.write_json("bench_vllm", results)
    return results


if __name__ == "__main__":
    main()
