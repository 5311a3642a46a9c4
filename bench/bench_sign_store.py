#!/usr/bin/env python
"""What verifying a signature where it is stored costs a push (issue 35).

Since issue 35 a bundle is kept only when it proves something: each one a push brings is read
with the strict shape check, checked against its commit's files, verified (one ECDSA
verification) with the trusted key it names, and counted against its commit's limits under a
lock of the commit's row, in the import's transaction (`mint.signing.stored.admit`).

Figures, on SQLite and PostgreSQL (a registry over each), N commits a push, each commit an
80 MB, 7B-shaped adapter (its blobs already there: what is timed is the metadata):
  * import: `receiving.import_objects` of a line of N commits, each signed by a trusted key,
    against a line of N unsigned commits, into the same repository, alternating (the
    receiving side alone, in this process);
  * push: `mint push` of such a line to a real `mint registry serve`, signed against
    unsigned, alternating (the whole round: three requests, the import in the registry).
min, median and max over the runs; the ratio is of the medians; per bundle is the difference
of the medians divided by N.

    python bench/bench_sign_store.py [--runs 7] [--commits 10] [--db sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_store as store  # noqa: E402

import _common as c  # noqa: E402


def source(tmp: Path, runs: int, n: int, key) -> tuple:
    """A repository with lines plain-I and signed-I (I < RUNS), each of N commits alternating
    two adapter folders, signed-I's signed by KEY; returns (repo, the two folders)."""
    from mint import api
    from mint.repo import init

    repo, _ = init(tmp / "source")
    api.base_add(repo, store.BASE_NAME, store.write_base_config(tmp / "base"))
    folders = [tmp / "a", tmp / "b"]
    for i, folder in enumerate(folders):
        store.write_adapter(folder, seed=10 + i)
    for i in range(runs):
        for j in range(n):
            folder = folders[j % 2]
            api.commit(repo, f"plain-{i}", folder, f"{j}", author="b")
            api.commit(repo, f"signed-{i}", folder, f"{j}", author="b", sign=key.private_key)
    return repo, folders


def payload(repo, line: str) -> dict:
    from mint.exchange import sending
    from mint.refs import RefsContainer

    with repo.db.read() as conn:
        head = RefsContainer(conn).head(line)
        return sending.export_objects(conn, sending.reachable(conn, [head], []))


def target(repo, tmp: Path, db: str, key, folders):
    """A repository (on DB) that trusts KEY, holding the adapters' blobs already."""
    from mint import api

    api.base_add(repo, store.BASE_NAME, store.write_base_config(tmp / "tbase"))
    api.key_add(repo, "bench", Path(key.public_key).read_text(), by="b")
    for folder in folders:
        for f in folder.iterdir():
            repo.store.put(f)


def imports(src, db: str, runs: int, key, folders) -> dict:
    """import_objects of plain-I against signed-I, alternating."""
    from mint.exchange import receiving

    out = {"plain": [], "signed": []}
    with c.temp_repo(db, "mint-bench-sign-store") as (repo, tmp):
        target(repo, tmp, db, key, folders)
        receiving.import_objects(repo, payload(src, "plain-0"), pushed_by="warm-up")
        for i in range(1, runs + 1):
            sides = [
                ("plain", payload(src, f"plain-{i}")),
                ("signed", payload(src, f"signed-{i}")),
            ]
            for side, p in sides if i % 2 else sides[::-1]:
                assert side == "plain" or p["signatures"]
                t, r = c.timed(lambda p=p: receiving.import_objects(repo, p, pushed_by="b"))
                assert len(r.stored) == len(p["commits"])
                kept = getattr(r, "signatures", None)  # None: code before issue 35
                assert kept in (None, len(p.get("signatures", []))), r
                out[side].append(t)
    return out


def pushes(src, db: str, runs: int, key, folders) -> dict:
    """`mint push` of plain-I against signed-I to a real registry, alternating."""
    from mint import api
    from mint.remote.repo import RemoteRepo
    from mint.remote.transfer_client import push

    from support.registry import create_token, running_registry

    out = {"plain": [], "signed": []}
    with c.temp_repo(db, "mint-bench-sign-push") as (repo, tmp):
        target(repo, tmp, db, key, folders)
        token = create_token(repo.root, "w", "writer")
        with running_registry(repo.root) as registry:
            remote = RemoteRepo(registry.url, token, cache=None)
            push(src, remote, ["plain-0"])  # warm-up: the first connection, imports
            for i in range(1, runs + 1):
                sides = [("plain", f"plain-{i}"), ("signed", f"signed-{i}")]
                for side, line in sides if i % 2 else sides[::-1]:
                    t, _ = c.timed(lambda line=line: push(src, remote, [line]))
                    out[side].append(t)
                    assert api.resolve(repo, line) == api.resolve(src, line)
            assert api.verify(repo, f"signed-{runs}").signers  # kept, and verifies there
    return out


def check_cost(src, key, repeats: int = 300) -> list[float]:
    """Seconds of the check itself, per bundle: its strict shape read and its signature
    verified with the key it names (no database), REPEATS times."""
    from mint.commits.rows import signatures_of
    from mint.refs import RefsContainer
    from mint.signing.keys import fingerprint

    try:
        from mint.signing.bundle import parse
        from mint.signing.stored import signer_of
    except ImportError:  # the code before issue 35 checked nothing there
        return []

    pem = Path(key.public_key).read_bytes()
    keys = {fingerprint(pem): ("bench", pem)}
    with src.db.read() as conn:
        bundle = signatures_of(conn, RefsContainer(conn).head("signed-0"))[0].encode()
    return c.repeat(lambda: signer_of(parse(bundle), keys, None, "b"), repeats)


def run(runs: int, n: int, dbs: list[str]) -> dict:
    from mint import api

    tmp = Path(
        tempfile.mkdtemp(prefix="mint-bench-sign-store-", dir=os.environ.get("MINT_BENCH_TMP"))
    )
    try:
        key = api.key_generate(tmp / "keys")
        src, folders = source(tmp, runs + 1, n, key)
        out = {"runs": runs, "commits": n, "check": check_cost(src, key)}
        for db in dbs:
            out[db] = {
                "import": imports(src, db, runs, key, folders),
                "push": pushes(src, db, runs, key, folders),
            }
        src.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def spread(values: list[float]) -> list[str]:
    return [
        f"{min(values) * 1000:.1f}",
        f"{c.median(values) * 1000:.1f}",
        f"{max(values) * 1000:.1f}",
    ]


def report(r: dict, dbs: list[str]) -> str:
    rows = []
    n = r["commits"]
    for db in dbs:
        for what in ("import", "push"):
            m = r[db][what]
            plain, signed = c.median(m["plain"]), c.median(m["signed"])
            each = (signed - plain) / n * 1000
            rows.append([f"{db} {what}: {n} unsigned commits", *spread(m["plain"]), "", ""])
            rows.append(
                [
                    f"{db} {what}: {n} signed commits",
                    *spread(m["signed"]),
                    f"{signed / plain:.2f}x",
                    f"{each:.2f}",
                ]
            )
    check = r["check"] or [float("nan")]
    rows.append(
        [
            "the check alone, one bundle",
            *[f"{x * 1000:.3f}" for x in (min(check), c.median(check), max(check))],
            "",
            "",
        ]
    )
    title = f"Verifying at store: a push of {n} commits, ms over {r['runs']} runs"
    return c.table(title, ["", "min", "median", "max", "ratio", "ms a bundle"], rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--commits", type=int, default=10)
    p.add_argument("--db", default="sqlite,postgresql")
    args = p.parse_args(argv)
    dbs = [d for d in args.db.split(",") if d != "postgresql" or c.pg_available()]
    t0 = time.perf_counter()
    r = run(args.runs, args.commits, dbs)
    r["wall_s"] = time.perf_counter() - t0
    r["environment"] = c.environment()
    print(report(r, dbs))
    path = c.write_json("bench_sign_store", r)
    print(f"\n(results in {path.relative_to(c.REPO_ROOT)}; {r['wall_s']:.0f} s)")
    return r


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
