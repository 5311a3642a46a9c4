#!/usr/bin/env python
"""The registry server (`mint registry serve`), measured through HTTP on real processes.

Figures (issue 10):
- push of an 80 MB adapter (blobs missing? -> PUT -> objects -> head) against sending the same
  bytes in one streaming PUT to the same server: target at most 1.3x; a re-push of unchanged
  work sends 0 blob bytes, in under 0.5 s;
- at 100,000 commits (the catalog of bench_catalog.py, on PostgreSQL): `log -n 20`, `show` and
  `resolve` p50 under 20 ms, `promote` p50 under 30 ms, each one request over a kept-alive
  connection; reads per second with 16 concurrent clients spread over two replicas.

With --show (issue 24, "catalog calls"): only `show` through a registry
(`GET /api/v1/commits/bench%40release`, the default answer with the tensor table summarized and
`?tensors=all`) on the cached catalog of catalog_fixture.py, on each database of --db: RUNS
rounds of --calls requests over a kept-alive connection, each round's p50 (the median of them,
with their min and max, and the p95 of every request), beside the target of 10 ms at 10^5
commits; with the server process's CPU time and context switches a request (from /proc), and
the SQL statements one request runs (counted in process). The load average is printed.

    python bench/bench_registry.py [--commits 100000] [--mb 80] [--runs 5] [--db postgresql]
    python bench/bench_registry.py --show [--commits 100000] [--runs 5] [--calls 100]
                                   [--db sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_catalog  # noqa: E402

import _common as c  # noqa: E402
from support.registry import create_token, start_registry  # noqa: E402

PUSH_TARGET, REPUSH_TARGET_S, READ_TARGET_MS, PROMOTE_TARGET_MS = 1.3, 0.5, 20.0, 30.0
SHOW_TARGET_MS = 10.0  # issue 24: show through the registry, p50 at 10^5 commits
SHOW_PATH = f"/api/v1/commits/{bench_catalog.LINE}%40{bench_catalog.TAG}"
SHOW_ANSWERS = {"summary": None, "tensors=all": {"tensors": "all"}}


def random_file(path: Path, size: int) -> str:
    """SIZE random bytes at PATH; returns their sha256."""
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for _ in range(size // (1 << 20)):
            chunk = os.urandom(1 << 20)
            digest.update(chunk)
            f.write(chunk)
    return digest.hexdigest()


def put_file(client, path: Path, blob: str) -> int:
    with open(path, "rb") as f:
        response = client.put(f"/api/v1/blobs/{blob}", content=f)
    assert response.status_code in (200, 201), response.text
    return path.stat().st_size if response.status_code == 201 else 0


def commit_wire(line: str, blob: str, size: int, parent: str | None) -> dict:
    """The wire form (mint.exchange.wire's) of a commit whose one file is the stored blob BLOB."""

    from mint.commits.rows import build_commit
    from mint.exchange import wire
    from mint.ids import Kind
    from mint.objects import FileEntry

    new = build_commit(
        Kind.ADAPTER,
        line,
        parents=[parent] if parent else [],
        files={"adapter_model.safetensors": FileEntry(blob, size)},
        base=None,
        base_fingerprint=None,
        message="bench",
        author="bench",
    )
    return wire.commit_wire(new)


def push(client, path: Path, blob: str, wire: dict, old: str | None) -> int:
    """The push protocol for one commit: missing blobs, their bytes, the object, the head."""
    missing = client.post("/api/v1/blobs/missing", json={"ids": [blob]}).json()["missing"]
    sent = sum(put_file(client, path, b) for b in missing)
    stored = client.post("/api/v1/objects", json={"commits": [wire]})
    assert stored.status_code == 200, stored.text
    if old != wire["id"]:
        moved = client.post(
            f"/api/v1/lines/{wire['line']}/head", json={"old": old, "new": wire["id"]}
        )
        assert moved.status_code == 200, moved.text
    return sent


def bench_push(server, token: str, folder: Path, mb: int, runs: int) -> dict:
    """Alternate a plain streaming PUT of MB random megabytes and a push of as many, runs times."""
    plain, pushed, repush, repush_bytes = [], [], [], []
    old = None
    with server.client(token) as client:
        for i in range(runs):
            a, b = folder / f"plain-{i}", folder / f"push-{i}"
            blob_a, blob_b = random_file(a, mb << 20), random_file(b, mb << 20)
            plain.append(c.timed(lambda: put_file(client, a, blob_a))[0])
            wire = commit_wire("big", blob_b, mb << 20, old)
            pushed.append(c.timed(lambda: push(client, b, blob_b, wire, old))[0])
            seconds, sent = c.timed(lambda: push(client, b, blob_b, wire, wire["id"]))
            repush.append(seconds)
            repush_bytes.append(sent)
            old = wire["id"]
            a.unlink()
            b.unlink()
    ratio = c.median(pushed) / c.median(plain)
    return {
        "mb": mb,
        "plain_s": plain,
        "push_s": pushed,
        "ratio": ratio,
        "repush_s": repush,
        "repush_bytes": max(repush_bytes),
    }


def percentile_ms(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_calls(client, release: str, runs: int) -> dict:
    """p50 and p90 of each read and of promote, one request at a time."""
    line = bench_catalog.LINE
    tag = f"{line}@{bench_catalog.TAG}"
    calls = {
        "log -n 20": lambda: client.get("/api/v1/log", params={"rev": line, "n": 20}),
        "show": lambda: client.get(f"/api/v1/commits/{tag.replace('@', '%40')}"),
        "resolve": lambda: client.get("/api/v1/resolve", params={"rev": tag}),
    }
    head = client.get("/api/v1/resolve", params={"rev": line}).json()["id"]
    moves = [0]

    def promote():  # each call moves the channel to the other of two commits
        moves[0] += 1
        rev = (release, head)[moves[0] % 2]
        return client.post("/api/v1/promote", json={"rev": rev, "channel": "bench-canary"})

    calls["promote"] = promote
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(runs):
        for name, fn in calls.items():
            seconds, response = c.timed(fn)
            assert response.status_code == 200, (name, response.text)
            times[name].append(seconds)
    return {
        name: {"p50_ms": percentile_ms(t, 0.5), "p90_ms": percentile_ms(t, 0.9)}
        for name, t in times.items()
    }


def bench_throughput(servers, token: str, seconds: float = 5.0, clients: int = 16) -> float:
    """Reads per second (resolve, log -n 20, show in turn) from CLIENTS threads, each on its own
    connection, half of them on each replica."""
    count, stop = [0] * clients, time.monotonic() + seconds
    tag = f"{bench_catalog.LINE}@{bench_catalog.TAG}"

    def work(i: int) -> None:
        with servers[i % len(servers)].client(token) as client:
            paths = [
                ("/api/v1/resolve", {"rev": tag}),
                ("/api/v1/log", {"rev": tag, "n": 20}),
                (f"/api/v1/commits/{tag.replace('@', '%40')}", None),
            ]
            while time.monotonic() < stop:
                path, params = paths[count[i] % 3]
                assert client.get(path, params=params).status_code == 200
                count[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(count) / seconds


def run(args) -> dict:
    with c.temp_repo(args.db, "mint-bench-registry") as (repo, tmp):
        built = bench_catalog.populate(repo, args.commits)
        print(f"  catalog: {args.commits:,} commits in {built['populate_s']:.1f} s", flush=True)
        token = create_token(repo.root, "bench", "admin")
        with contextlib.ExitStack() as stack:
            servers = [start_registry(repo.root) for _ in range(2)]
            for server in servers:
                stack.callback(server.stop)
            with servers[0].client(token) as client:
                calls = bench_calls(client, built["release"], args.runs * 10)
            reads = bench_throughput(servers, token)
            pushes = bench_push(servers[0], token, tmp, args.mb, args.runs)
    return {
        "commits": args.commits,
        "db": args.db,
        "calls": calls,
        "reads_per_s": reads,
        "push": pushes,
    }


# --- show on the cached catalog (--show) --------------------------------------------------


def run_show(args) -> dict:
    dbs = (args.db or "sqlite,postgresql").split(",")
    if "postgresql" in dbs and not c.pg_available():
        print(f"PostgreSQL is not reachable at {c.PG_ADMIN_URL}: SQLite only", file=sys.stderr)
        dbs = [d for d in dbs if d != "postgresql"]
    out = {"commits": args.commits, "runs": args.runs, "calls": args.calls, "figures": {}}
    out["load"] = [os.getloadavg()[0]]
    for db in dbs:
        with bench_catalog.cached_catalog(db, args.commits) as (repo, _, _, _):
            token = create_token(repo.root, "bench", "reader")
            statements = show_statements(repo, token)
            server = start_registry(repo.root)
            try:
                with server.client(token) as client:
                    for answer, params in SHOW_ANSWERS.items():
                        got = time_show(client, server.pid, params, args.runs, args.calls)
                        got["statements"] = statements[answer]
                        out["figures"][f"{db}/{answer}"] = got
                        out["load"].append(os.getloadavg()[0])
            finally:
                server.stop()
    return out


def time_show(client, pid: int, params, runs: int, calls: int) -> dict:
    """RUNS rounds of CALLS requests: each round's p50 (ms), the p95 of all, and the server's
    CPU time (ms) and context switches a request."""
    for _ in range(20):  # warm: the pool's connections, SQLAlchemy's compiled statements
        assert client.get(SHOW_PATH, params=params).status_code == 200
    cpu, switches = _process_cpu(pid), _process_switches(pid)
    p50s, every = [], []
    for _ in range(runs):
        times = []
        for _ in range(calls):
            seconds, response = c.timed(lambda: client.get(SHOW_PATH, params=params))
            assert response.status_code == 200, response.text
            times.append(seconds * 1000)
        p50s.append(c.median(times))
        every += times
    n = runs * calls
    return {
        "p50_ms": c.median(p50s),
        "min_ms": min(p50s),
        "max_ms": max(p50s),
        "p95_ms": percentile_ms([t / 1000 for t in every], 0.95),
        "server_cpu_ms": (_process_cpu(pid) - cpu) * 1000 / n,
        "switches": (_process_switches(pid) - switches) / n,
    }


def show_statements(repo, token: str) -> dict[str, int]:
    """The SQL statements one show request runs, by answer (the app in this process)."""
    from fastapi.testclient import TestClient
    from sqlalchemy import event

    from mint.registry.app import create_app

    seen: list[str] = []

    def count(conn, cursor, statement, *rest):
        seen.append(statement)

    counts = {}
    with TestClient(create_app(repo), headers={"Authorization": f"Bearer {token}"}) as client:
        event.listen(repo.db.engine, "before_cursor_execute", count)
        try:
            for answer, params in SHOW_ANSWERS.items():
                client.get(SHOW_PATH, params=params)  # the token read once, then believed
                seen.clear()
                assert client.get(SHOW_PATH, params=params).status_code == 200
                counts[answer] = len(seen)
        finally:
            event.remove(repo.db.engine, "before_cursor_execute", count)
    return counts


def _process_cpu(pid: int) -> float:
    """Seconds of CPU (user and system) process PID has used, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_switches(pid: int) -> int:
    """Context switches of all PID's threads so far (voluntary and not)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches" in line:
                    total += int(line.split()[1])
    return total


def show_report(r: dict) -> str:
    rows = []
    for key, f in r["figures"].items():
        summary = key.endswith("/summary")
        target = f"<= {SHOW_TARGET_MS:.0f}" if summary else "(info)"
        ok = c.verdict(f["p50_ms"], SHOW_TARGET_MS) if summary else ""
        spread = f"{f['p50_ms']:.2f} ({f['min_ms']:.2f}-{f['max_ms']:.2f})"
        rows.append([key, spread, f"{f['p95_ms']:.2f}", f"{f['server_cpu_ms']:.2f}"])
        rows[-1] += [f"{f['switches']:.1f}", f["statements"], target, ok]
    header = ["db/answer", "p50 (min-max) ms", "p95 ms", "server CPU ms", "ctx switches"]
    header += ["statements", "target ms", ""]
    title = (
        f"show through the registry at {r['commits']:,} commits: {r['runs']} runs x"
        f" {r['calls']} requests; load average " + " -> ".join(f"{x:.1f}" for x in r["load"])
    )
    return c.table(title, header, rows)


def report(r: dict) -> str:
    rows = []
    for name, v in r["calls"].items():
        target = PROMOTE_TARGET_MS if name == "promote" else READ_TARGET_MS
        rows.append([name, v["p50_ms"], v["p90_ms"], target, c.verdict(v["p50_ms"], target)])
    title = f"registry at {r['commits']:,} commits ({r['db']}), through HTTP"
    p = r["push"]
    push_s, plain_s, repush_s = (c.median(p[k]) for k in ("push_s", "plain_s", "repush_s"))
    repush_ok = p["repush_bytes"] == 0 and repush_s < REPUSH_TARGET_S
    return "\n".join(
        [
            c.table(title, ["call", "p50 ms", "p90 ms", "target ms", ""], rows),
            f"reads/s, 16 clients over 2 replicas: {r['reads_per_s']:,.0f}",
            f"push {p['mb']} MB: median {push_s:.2f} s against one streaming PUT {plain_s:.2f} s,"
            f" ratio {p['ratio']:.2f}x (target <= {PUSH_TARGET}x) "
            + c.verdict(p["ratio"], PUSH_TARGET),
            f"re-push unchanged: {p['repush_bytes']} blob bytes, median {repush_s:.3f} s "
            f"(target 0 bytes, < {REPUSH_TARGET_S} s) " + ("ok" if repush_ok else "MISS"),
        ]
    )


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--commits", type=int, default=100_000)
    p.add_argument("--mb", type=int, default=80)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--db", default=None, help="postgresql; with --show: sqlite,postgresql")
    p.add_argument("--show", action="store_true", help="only show, on the cached catalog")
    p.add_argument("--calls", type=int, default=100, help="requests a round (--show)")
    args = p.parse_args(argv)
    if args.show:
        results = run_show(args)
        print(show_report(results))
        c.write_json("bench_registry_show", results)
        return results
    args.db = args.db or "postgresql"
    if args.db not in ("sqlite", "postgresql"):
        p.error("--db is sqlite or postgresql")
    results = run(args)
    print(report(results))
    c.write_json("bench_registry", results)
    return results


if __name__ == "__main__":
    main()
