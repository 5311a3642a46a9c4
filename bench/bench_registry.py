#!/usr/bin/env python
"""The registry server (`mint registry serve`), measured through HTTP on real processes.

Figures (issue 10):
- push of an 80 MB adapter (blobs missing? -> PUT -> objects -> head) against sending the same
  bytes in one streaming PUT to the same server: target at most 1.3x; a re-push of unchanged
  work sends 0 blob bytes, in under 0.5 s;
- at 100,000 commits (the catalog of bench_catalog.py, on PostgreSQL): `log -n 20`, `show` and
  `resolve` p50 under 20 ms, `promote` p50 under 30 ms, each one request over a kept-alive
  connection; reads per second with 16 concurrent clients spread over two replicas.

    python bench/bench_registry.py [--commits 100000] [--mb 80] [--runs 5] [--db postgresql]
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
    """The wire form (mint.wire's) of a commit whose one file is the stored blob BLOB."""

    from mint import wire
    from mint.commits.rows import build_commit
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
    p.add_argument("--db", default="postgresql", choices=["sqlite", "postgresql"])
    results = run(p.parse_args(argv))
    print(report(results))
    c.write_json("bench_registry", results)
    return results


if __name__ == "__main__":
    main()
