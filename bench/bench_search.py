#!/usr/bin/env python
"""`mint search` at 10^5 commits: p50 and p95 of each kind of query, on SQLite and PostgreSQL.

Target (issue 22): under 50 ms each, through `mint.api.search` in-process (the repository
open, no interpreter start-up), newest first, `-n 20` unless the query says otherwise.

The catalog: N commits (10^5) on 1,000 lines `line-0000`..`line-0999`, interleaved in time,
by 50 authors. Each commit's meta: `lr` (one of 5 values), `epochs` (1..5, a number), `seed`
(0..99, a number) and `data` (one of 1,000 dataset ids); one evaluation each under contract
`q` with `acc` and `loss` uniform in [0, 1]. Tags: `rel-K` on every 100th commit (one commit
each) and `stable` on one commit of each of 100 lines. The rows go straight in through the
schema `mint init` migrates, the search index rows (`commit_meta`, `evaluation_metrics`) built
by the functions every insert uses (`mint.commits.indexes`). PostgreSQL gets
`VACUUM ANALYZE` after the load, as autovacuum would; SQLite gets nothing (mint never runs
ANALYZE).

    python bench/bench_search.py [--commits 100000] [--db sqlite,postgresql] [--runs 50]
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

LINES = 1000
AUTHORS = 50
LRS = ("0.0001", "0.0003", "0.001", "0.003", "0.01")
DATASETS = 1000
TAG_EVERY = 100
STABLE_LINES = 100
BATCH = 20_000
TARGET_MS = 50.0
START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
CONTRACT = 'name = "q"\nchannel = "staging"\n[[metric]]\nname = "acc"\nmin = 0.0\n'
CONTRACT += '[[metric]]\nname = "loss"\nmax = 1.0\n'


def hexid(*parts) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()


def line_of(i: int) -> str:
    return f"line-{i % LINES:04d}"


def queries(ids: list[str]) -> list[tuple[str, dict]]:
    """(what, search's arguments) for each kind of query timed."""
    rare_data = hexid("data", 7)
    return [
        ("newest 20, no condition", {}),
        ("--meta data=ID (100 of N)", {"meta": [f"data={rare_data}"]}),
        ("--meta lr=0.001 (1 in 5)", {"meta": ["lr=0.001"]}),
        ("--meta lr= --meta epochs= (1 in 25)", {"meta": ["lr=0.001", "epochs=3"]}),
        ("--meta seed=42 (a number, 1 in 100)", {"meta": ["seed=42"]}),
        ("--meta lr=nope (none)", {"meta": ["lr=nope"]}),
        ("--metric acc>=0.999 (1 in 1000)", {"metric": ["acc>=0.999"]}),
        ("--metric acc>=0.5 (half)", {"metric": ["acc>=0.5"]}),
        ("--metric acc>0.4 acc<0.401 (narrow)", {"metric": ["acc>0.4", "acc<0.401"]}),
        ("--tag rel-500 (one)", {"tag": ["rel-500"]}),
        ("--tag stable (100)", {"tag": ["stable"]}),
        ("--line line-0042 (100)", {"line": "line-0042"}),
        ("--line 'line-004*' (10 lines)", {"line": "line-004*"}),
        ("--line 'line-*' (every line)", {"line": "line-*"}),
        ("--author author-7 (1 in 50)", {"author": "author-7"}),
        (
            "lr + acc>=0.9 + author (AND)",
            {"meta": ["lr=0.001"], "metric": ["acc>=0.9"], "author": "author-7"},
        ),
        ("--meta data=ID, all (no -n)", {"meta": [f"data={rare_data}"], "n": None}),
        ("a token of 'line-00*' (registry)", {"readable": _token("line-00*")}),
    ]


def _token(glob: str):
    import fnmatch

    return lambda line: fnmatch.fnmatchcase(line, glob)


def populate(repo, n: int) -> list[str]:
    """N commits with their meta, evaluations, tags and search rows (see the module)."""
    import sqlalchemy as sa

    from mint import api
    from mint import schema as s
    from mint.commits.indexes import meta_rows, metric_rows

    path = Path(repo.root) / "q.toml"
    path.write_text(CONTRACT)
    contract = api.contract_add(repo, path, by="bench").contract.id
    rng = random.Random(0)
    ids = [hexid("commit", i) for i in range(n)]
    eval_rows, metric_index = [], []
    with repo.db.engine.begin() as conn:
        for lo in range(0, n, BATCH):
            commits, meta_index = [], []
            for i in range(lo, min(n, lo + BATCH)):
                meta = {
                    "lr": LRS[i % len(LRS)],
                    "epochs": 1 + (i // 5) % 5,
                    "seed": i % 100,
                    "data": hexid("data", i % DATASETS),
                }
                commits.append(_commit_row(ids[i], i, meta))
                meta_index += [r | {"commit_id": ids[i]} for r in meta_rows(meta)]
                metrics = {"acc": rng.random(), "loss": rng.random()}
                eval_rows.append(_eval_row(i + 1, ids[i], contract, metrics))
                metric_index += [
                    r | {"evaluation_id": i + 1, "commit_id": ids[i]} for r in metric_rows(metrics)
                ]
            conn.execute(s.commits.insert(), commits)
            conn.execute(s.commit_meta.insert(), meta_index)
        for lo in range(0, n, BATCH):
            conn.execute(s.evaluations.insert(), eval_rows[lo : lo + BATCH])
        for lo in range(0, len(metric_index), BATCH):
            conn.execute(s.evaluation_metrics.insert(), metric_index[lo : lo + BATCH])
        conn.execute(s.lines.insert(), _line_rows(ids))
        conn.execute(s.refs.insert(), _tag_rows(ids))
    if repo.db.engine.dialect.name == "postgresql":
        with repo.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))
    return ids


def _commit_row(cid: str, i: int, meta: dict) -> dict:
    return dict(
        id=cid,
        kind="adapter",
        line=line_of(i),
        tree=hexid("tree", i),
        base=None,
        base_fingerprint=None,
        message=f"commit {i}",
        author=f"author-{i % AUTHORS}",
        created_at=START + dt.timedelta(seconds=i),
        meta=meta,
        provenance={},
    )


def _eval_row(eid: int, cid: str, contract: str, metrics: dict) -> dict:
    at = START + dt.timedelta(seconds=eid)
    return dict(
        id=eid,
        commit_id=cid,
        contract_id=contract,
        metrics=metrics,
        source="manual",
        by="b",
        at=at,
    )


def _line_rows(ids: list[str]) -> list[dict]:
    n = len(ids)
    return [
        dict(
            name=line_of(k),
            kind="adapter",
            head=ids[max(i for i in range(k, n, LINES))],
            commit_count=len(range(k, n, LINES)),
            created_at=START,
        )
        for k in range(min(LINES, n))
    ]


def _tag_rows(ids: list[str]) -> list[dict]:
    rows = [
        _tag(ids[i], line_of(i), f"rel-{i // TAG_EVERY}") for i in range(0, len(ids), TAG_EVERY)
    ]
    rows += [_tag(ids[k + LINES], line_of(k), "stable") for k in range(STABLE_LINES)]
    return rows


def _tag(cid: str, line: str, name: str) -> dict:
    return dict(line=line, name=name, kind="tag", target=cid, updated_at=START)


def measure(repo, ids: list[str], runs: int) -> list[list]:
    from mint import api

    rows = []
    for what, query in queries(ids):
        args = {"n": 20} | query
        found = len(api.search(repo, **args))
        times = [t * 1000 for t in c.repeat(lambda: api.search(repo, **args), runs, warmup=2)]
        p50, p95 = statistics.median(times), statistics.quantiles(times, n=20)[-1]
        rows.append([what, found, p50, p95, c.verdict(p95, TARGET_MS)])
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commits", type=int, default=100_000)
    p.add_argument("--db", default=None, help="sqlite,postgresql (default: both if PG answers)")
    p.add_argument("--runs", type=int, default=50)
    args = p.parse_args(argv)
    dbs = args.db.split(",") if args.db else ["sqlite", "postgresql"]
    if "postgresql" in dbs and not c.pg_available():
        print(f"PostgreSQL is not reachable at {c.PG_ADMIN_URL}: SQLite only", file=sys.stderr)
        dbs.remove("postgresql")
    results = {}
    for db in dbs:
        with c.temp_repo(db, "bench-search") as (repo, _):
            seconds, ids = c.timed(lambda: populate(repo, args.commits))
            rows = measure(repo, ids, args.runs)
        title = f"mint search, {db}, {args.commits:,} commits (loaded in {seconds:.0f} s)"
        print(c.table(title, ["query (-n 20)", "found", "p50 ms", "p95 ms", "<50"], rows))
        print()
        results[db] = rows
    c.write_json("bench_search", {"commits": args.commits, "runs": args.runs, "results": results})


if __name__ == "__main__":
    main()
