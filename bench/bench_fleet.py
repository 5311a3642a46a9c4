#!/usr/bin/env python
"""What serves, recorded (issue 38): what reporting costs a serving process and a registry.

Figures:
  * serving turns/s with reporting on vs off (target: within 2 %): the demo MoL behind `mint
    serve`'s HTTP app, 16 clients over every expert, its reports going to a real `mint
    registry serve` every 10 s (the default) and, to stress it, every 0.5 s; the three modes
    alternate round by round on one runtime.
  * the registry under 1,000 instances reporting every 10 s (target: p95 of a report <= 20 ms):
    `mint registry serve` over PostgreSQL, 1,000 simulated instances each sending its report
    every 10 s (staggered), half way through a promote that every instance reports switching;
    latency of each report as a client sees it, and the CPU the registry process used.
  * `--wait`'s latency after the last switch: three simulated instances following another
    channel switch 0.1-0.6 s after a promote; how long after the last one's report
    `fleet_wait` returns (it reads the fleet every 0.1 s).

    python bench/bench_fleet.py [--rounds 4] [--turns 6] [--instances 1000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402
from support import runtime as support  # noqa: E402  (tests/ is on the path now)
from support.registry import create_token, start_registry  # noqa: E402

BY = "bench"


def percentile(values: list[float], p: float) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=1000, method="inclusive")[int(p * 10) - 1]


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process PID has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


# --- serving with reporting on and off -------------------------------------------------------


def bench_serving(tmp: Path, rounds: int, turns: int, clients: int) -> dict:
    from bench_serving import client_requests

    from mint import api
    from mint.remote.repo import RemoteRepo
    from mint.runtime.fleet import start_reporting
    from mint.runtime.server import ServerThread
    from mint.runtime.service import open_runtime

    demo = _demo(tmp)
    repo, _ = api.init(tmp / "serving-repo")
    support.committed_demo(repo, demo, tmp / "set")
    token = create_token(repo.root, "serving", "reader")
    registry = start_registry(repo.root)
    remote = RemoteRepo(registry.url, token)
    runtime = open_runtime(repo, "macaron@production", demo.base, traces=False)
    runtime_report_cpu = _reporter_cpu(runtime, remote)
    requests = client_requests(clients, turns)
    modes = {"off": None, "every 10 s": 10.0, "every 0.5 s": 0.5}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    sent: dict[str, int] = {m: 0 for m in modes}
    try:
        with ServerThread(runtime, log_level="error") as url:
            c.chat_load(url, [bodies[:1] for bodies in requests])  # warm-up
            for r in range(rounds):
                order = list(modes)[r % 3 :] + list(modes)[: r % 3]
                for mode in order:
                    reporter = None
                    if modes[mode] is not None:
                        reporter = start_reporting(
                            runtime, remote, "macaron@production", instance="bench-1",
                            engine="embedded", interval=modes[mode], by=BY,
                        )  # fmt: skip
                    seconds, _, failed, _ = c.chat_load(url, requests)
                    assert failed == 0
                    rates[mode].append(clients * turns / seconds)
                    if reporter is not None:
                        reporter.close(goodbye=False)
                        sent[mode] += reporter.sent
                        runtime.metrics.changed = lambda: None
    finally:
        runtime.close()
        remote.close()
        registry.stop()
        repo.close()
    out = {m: {"turns_per_s": c.median(v), "all": v, "reports": sent[m]} for m, v in rates.items()}
    for mode in modes:  # each round's ratio to the same round's run without reports
        ratios = [a / b for a, b in zip(rates[mode], rates["off"])]
        out[mode] |= {"vs_off": c.median(ratios), "vs_off_min": min(ratios)}
        out[mode]["vs_off_max"] = max(ratios)
    out["report_cpu_ms"] = _report_cost(runtime_report_cpu)
    return out


def _reporter_cpu(runtime, remote, n: int = 200) -> list[float]:
    """CPU milliseconds this process spends on one report (building it and sending it), each
    of N reports sent one after the other."""
    from mint.runtime.fleet import start_reporting

    reporter = start_reporting(
        runtime, remote, "macaron@production", instance="bench-cpu", engine="embedded",
        interval=3600.0, by=BY,
    )  # fmt: skip
    costs = []
    for _ in range(n):
        t = time.process_time()
        assert reporter.report_once()
        costs.append(1000 * (time.process_time() - t))
    reporter.close(goodbye=True)
    runtime.metrics.changed = lambda: None
    return costs


def _report_cost(costs: list[float]) -> dict:
    return {"median": c.median(costs), "p95": percentile(costs, 95)}


def _demo(tmp: Path):
    import torch

    torch.set_num_threads(1)
    from mint.examples import train

    return train.build_demo(tmp / "demo")


# --- the registry under 1,000 instances --------------------------------------------------------


def _report(instance: int, commit: str, since: str, started: str) -> dict:
    name = {"name": "chat@production", "commit": commit, "since": since}
    return {
        "instance": f"pod-{instance:04d}",
        "engine": "embedded",
        "interval": 10.0,
        "started_at": started,
        "names": [name],
    }


def _instances(url: str, token: str, n: int, seconds: float, commits, switch_at: float):
    """N instances reporting every 10 s for SECONDS, staggered; at SWITCH_AT seconds each
    switches to the second commit (reported at its next report). A dispatcher hands each
    report to one of WORKERS client threads when it is due (as N processes would send it);
    latencies by phase, how late reports were sent, and how many failed."""
    import queue

    import httpx

    started, workers = now_iso(), 32
    latencies: dict[str, list[float]] = {"steady": [], "switching": []}
    late: list[float] = []
    failed = [0]
    due: queue.Queue = queue.Queue()
    state = {i: (commits[0], now_iso()) for i in range(n)}
    t0 = time.monotonic()

    def worker() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            while (item := due.get()) is not None:
                i, when = item
                commit, since = state[i]
                phase = "steady"
                if when - t0 >= switch_at and commit != commits[1]:
                    commit, since, phase = commits[1], now_iso(), "switching"
                    state[i] = (commit, since)
                t = time.monotonic()
                late.append(t - when)
                try:
                    r = http.post("/api/v1/fleet/report", json=_report(i, commit, since, started))
                    ok = r.status_code == 204
                except httpx.HTTPError:  # a kept-alive connection the registry closed: dropped
                    ok = False
                latencies[phase].append(time.monotonic() - t)
                failed[0] += not ok

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for thread in threads:
        thread.start()
    k = 0
    while (when := t0 + k * 10.0 / n) < t0 + seconds:
        time.sleep(max(0.0, when - time.monotonic()))
        due.put((k % n, when))
        k += 1
    for _ in threads:
        due.put(None)
    for thread in threads:
        thread.join()
    return latencies, failed[0], late


def bench_registry(tmp: Path, n: int, seconds: float, waits: int) -> dict:
    from mint import api
    from mint.examples import tiny

    base = tiny.build_base(tmp / "tiny-llama")
    model, _ = tiny.load_base(base)
    adapters = [tiny.build_adapter(base, tmp / f"a{i}", seed=i, model=model) for i in (1, 2)]
    with c.pg_database("mint_bench") as db:
        repo, _ = api.init(tmp / "registry-repo", db)
        api.base_add(repo, "tiny-llama", base)
        commits = [api.commit(repo, "chat", a, "c", author=BY).id for a in adapters]
        api.promote(repo, commits[0], "production", by=BY)
        api.promote(repo, commits[0], "staging", by=BY)  # the --wait runs', apart from the load
        token = create_token(repo.root, "fleet", "reader")
        ops = create_token(repo.root, "ops", "admin")
        registry = start_registry(repo.root)
        try:
            out = _load_registry(registry, repo, token, n, seconds, commits)
            out["wait"] = _wait_latency(registry, token, ops, commits, waits)
        finally:
            registry.stop()
            repo.close()
    return out


def _load_registry(registry, repo, token: str, n: int, seconds: float, commits) -> dict:
    from mint import api

    cpu0, t0 = cpu_seconds(registry.pid), time.monotonic()
    me0 = time.process_time()
    move = lambda: api.promote(repo, commits[1], "production", by=BY)  # noqa: E731
    timer = threading.Timer(seconds / 2, move)
    timer.start()
    latencies, failed, late = _instances(registry.url, token, n, seconds, commits, seconds / 2)
    timer.join()
    wall = time.monotonic() - t0
    cpu = cpu_seconds(registry.pid) - cpu0
    everything = latencies["steady"] + latencies["switching"]
    api.rollback(repo, "chat@production", by=BY)
    return {
        "instances": n,
        "reports": len(everything),
        "failed": failed,
        "reports_per_s": len(everything) / wall,
        "registry_cpu_cores": cpu / wall,
        "load_generator_cpu_cores": (time.process_time() - me0) / wall,
        "sent_late_p95_ms": 1000 * percentile(late, 95),
        **{
            phase: {
                "n": len(values),
                "p50_ms": 1000 * percentile(values, 50),
                "p95_ms": 1000 * percentile(values, 95),
                "p99_ms": 1000 * percentile(values, 99),
                "max_ms": 1000 * max(values),
            }
            for phase, values in (("all", everything), *latencies.items())
            if values
        },
    }


def _wait_latency(registry, token: str, ops: str, commits, runs: int) -> dict:
    """How long after the last of three instances reported its switch `fleet_wait` returns."""
    import httpx

    from mint import api
    from mint.remote.repo import RemoteRepo

    remote = RemoteRepo(registry.url, ops)
    started = now_iso()
    http = httpx.Client(base_url=registry.url, headers={"Authorization": f"Bearer {token}"})
    ref, names = "chat@staging", [f"waiter-{i}" for i in range(3)]

    def report(i: int, commit: str) -> float:
        body = _report(0, commit, now_iso(), started) | {"instance": names[i]}
        body["names"][0]["name"] = ref
        assert http.post("/api/v1/fleet/report", json=body).status_code == 204
        return time.monotonic()

    for i in range(3):
        report(i, api.resolve(remote, ref))
    after: list[float] = []
    rng = random.Random(0)
    for run in range(runs):
        target = commits[(run + 1) % 2]  # the one the channel does not hold
        api.promote(remote, target, "staging", by=BY)
        done: list[float] = []

        def switch(i: int, delay: float) -> None:
            time.sleep(delay)
            done.append(report(i, target))

        threads = [
            threading.Thread(target=switch, args=(i, rng.uniform(0.1, 0.6))) for i in range(3)
        ]
        for thread in threads:
            thread.start()
        api.fleet_wait(remote, ref, target, timeout=60)
        returned = time.monotonic()
        for thread in threads:
            thread.join()
        after.append(returned - max(done))
    http.close()
    remote.close()
    return {"runs": runs, "median_ms": 1000 * c.median(after), "max_ms": 1000 * max(after)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--turns", type=int, default=12)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--waits", type=int, default=20)
    parser.add_argument("--skip-serving", action="store_true")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-", dir=os.environ.get("MINT_BENCH_TMP")))
    load0 = os.getloadavg()
    results: dict = {}
    if not args.skip_serving:
        results["serving"] = bench_serving(tmp, args.rounds, args.turns, args.clients)
        serving = results["serving"]
        rows = [
            [mode, v["turns_per_s"], f"{v['vs_off']:.3f}x", f"{v['vs_off_min']:.3f}x",
             f"{v['vs_off_max']:.3f}x", v["reports"]]
            for mode, v in serving.items() if mode != "report_cpu_ms"
        ]  # fmt: skip
        title = f"Serving with reports (median of {args.rounds} rounds, {args.clients} clients)"
        head = ["reporting", "turns/s", "vs off", "min", "max", "reports sent"]
        print(c.table(title, head, rows))
        cost = serving["report_cpu_ms"]
        share = cost["median"] / 100  # ms every 10,000 ms, in percent
        print(f"one report costs the serving process {cost['median']:.2f} ms of CPU (median; "
              f"p95 {cost['p95']:.2f}): every 10 s, {share:.4f} % of a core")  # fmt: skip
    results["registry"] = bench_registry(tmp, args.instances, args.seconds, args.waits)
    reg = results["registry"]
    rows = [
        [phase, reg[phase]["n"], reg[phase]["p50_ms"], reg[phase]["p95_ms"], reg[phase]["p99_ms"],
         reg[phase]["max_ms"]]
        for phase in ("all", "steady", "switching") if phase in reg
    ]  # fmt: skip
    title = (
        f"The registry (PostgreSQL) under {reg['instances']} instances reporting every 10 s, "
        f"{args.seconds:g} s: {reg['reports_per_s']:.0f} reports/s, {reg['failed']} failed, "
        f"registry CPU {reg['registry_cpu_cores']:.2f} cores, sent late by "
        f"{reg['sent_late_p95_ms']:.0f} ms at p95"
    )
    print()
    print(c.table(title, ["reports", "n", "p50 ms", "p95 ms", "p99 ms", "max ms"], rows))
    wait = reg["wait"]
    print(f"\n--wait after the last switch: median {wait['median_ms']:.0f} ms, "
          f"max {wait['max_ms']:.0f} ms over {wait['runs']} promotes")  # fmt: skip
    print(f"\n(load average before {load0}, after {os.getloadavg()})")
    results["load_average"] = {"before": load0, "after": os.getloadavg()}
    print(c.write_json("fleet", results))


if __name__ == "__main__":
    main()
