#!/usr/bin/env python
"""Catalog queries with 1,000 and 100,000 commits, on SQLite and on PostgreSQL.

Figures (issue 2, "Figures to measure"): `log LINE -n 20`, resolving `LINE@TAG` and `show`,
timed inside the process as the API calls (the repository already open, no interpreter
start-up): target under 50 ms each, and flat as the catalog grows from 1,000 to 100,000.
`log -n 20` over every line is measured too, for information.

The catalog is filled directly with SQLAlchemy Core (`api.commit` 100,000 times would take
hours; the tensor rows, the bulk, go through the connection's driver cursor): many lines,
each a chain of commits whose parent is the line's previous commit, the
lines interleaved in time; every 10th commit of a line is tagged, with its ref_history entry;
each commit has its two files and 14 tensor rows, and the tagged commit that is shown
(`bench@release`) has the 448 tensor rows of a 7B-shaped r=16 adapter. The `bench` line holds a
tenth of all commits (100 or 10,000), every other line 100.

PostgreSQL gets `VACUUM ANALYZE` after the load, as autovacuum would do on a live database;
SQLite gets nothing (mint never runs ANALYZE there). Both sizes of one database are open at
once and their calls are interleaved, so the 100k/1k ratio is measured in one run.

    python bench/bench_catalog.py [--sizes 1000,100000] [--db sqlite,postgresql] [--runs 30]
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

LINE = "bench"
TAG = "release"
PER_LINE = 100
TAG_EVERY = 10
BATCH = 2000
BASE = "llama-7b-shape"
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SHAPES = {  # (in, out) for Llama-2-7B
    "q_proj": (4096, 4096),
    "k_proj": (4096, 4096),
    "v_proj": (4096, 4096),
    "o_proj": (4096, 4096),
    "gate_proj": (4096, 11008),
    "up_proj": (4096, 11008),
    "down_proj": (11008, 4096),
}
TARGET_MS = 50.0
FLAT = 1.5  # 100k/1k median ratio that still counts as flat on a noisy machine


def hexid(*parts) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()


def tensor_rows(cid: str, layers: int) -> list[tuple]:
    """(commit_id, file, name, dtype, shape as JSON text, sha256, nbytes, offset) rows."""
    rows, offset, k = [], 0, 0
    for i in range(layers):
        for mod in MODULES:
            group = "self_attn" if mod in MODULES[:4] else "mlp"
            fan_in, fan_out = SHAPES[mod]
            for part, (a, b) in (("lora_A", (16, fan_in)), ("lora_B", (fan_out, 16))):
                nbytes = a * b * 2
                name = f"base_model.model.model.layers.{i}.{group}.{mod}.{part}.weight"
                rows.append(
                    (
                        cid,
                        "adapter_model.safetensors",
                        name,
                        "BF16",
                        f"[{a},{b}]",
                        cid[:48] + f"{k:016x}",
                        nbytes,
                        offset,
                    )
                )
                offset += nbytes
                k += 1
    return rows


def insert_tensors(conn, rows: list[tuple]) -> None:
    """The bulk of the rows: straight to the driver, past SQLAlchemy's per-row parameter work
    (the same table, columns and JSON text that Core would write)."""
    mark = "?" if conn.dialect.name == "sqlite" else "%s"
    cols = '"commit_id", "file", "name", "dtype", "shape", "sha256", "nbytes", "offset"'
    conn.exec_driver_sql(f"INSERT INTO tensors ({cols}) VALUES ({', '.join([mark] * 8)})", rows)


ADAPTER_CONFIG = {
    "peft_type": "LORA",
    "task_type": "CAUSAL_LM",
    "r": 16,
    "lora_alpha": 32,
    "lora_dropout": 0.05,
    "bias": "none",
    "target_modules": list(MODULES),
    "base_model_name_or_path": BASE,
    "inference_mode": True,
}
PEFT = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": sorted(MODULES)}
BASE_CONFIG = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
}


def plan(n: int, seed: int = 0) -> list[str]:
    """The line of each commit, in time order: `bench` holds n/10, other lines PER_LINE each."""
    n_bench = max(PER_LINE, n // 10)
    others = n - n_bench
    order = [LINE] * n_bench
    for k in range(others):
        order.append(f"line-{k // PER_LINE:05d}")
    random.Random(seed).shuffle(order)
    return order


def populate(repo, n: int) -> dict:
    """Fill an empty, migrated catalog with n commits. Returns counts and the seconds it took."""
    import sqlalchemy as sa

    from mint import schema as s
    from mint.bases import fingerprint

    t0 = time.perf_counter()
    order = plan(n)
    n_bench = order.count(LINE)
    release_pos = n_bench // 2
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    fp = fingerprint(BASE_CONFIG)
    heads: dict[str, str] = {}
    counts: dict[str, int] = {}
    created: dict[str, dt.datetime] = {}
    release_id = None
    totals = {"commits": 0, "commit_parents": 0, "files": 0, "tensors": 0, "refs": 0}
    engine = repo.db.engine
    # One connection for the whole load; SQLite gets a page cache big enough for the indexes.
    load = engine.connect()
    if repo.db.dialect == "sqlite":
        load.exec_driver_sql("PRAGMA cache_size=-262144")
    else:
        load.exec_driver_sql("SET synchronous_commit = off")
    load.commit()
    with load.begin():
        load.execute(
            s.bases.insert().values(
                name=BASE, fingerprint=fp, config=BASE_CONFIG, source=None, created_at=start
            )
        )
    for lo in range(0, n, BATCH):
        commits, parents, files, tensors, refs, history = [], [], [], [], [], []
        for g in range(lo, min(n, lo + BATCH)):
            line = order[g]
            pos = counts.get(line, 0)
            cid = hexid("commit", g)
            at = start + dt.timedelta(seconds=g)
            commits.append(
                {
                    "id": cid,
                    "kind": "adapter",
                    "line": line,
                    "tree": hexid("tree", g),
                    "base": BASE,
                    "base_fingerprint": fp,
                    "message": f"training run {pos}: lr sweep",
                    "author": "bench",
                    "created_at": at,
                    "meta": {"step": pos * 1000, "loss": round(2.0 / (pos + 1), 4)},
                    "provenance": {},
                    "peft": PEFT,
                    "config": ADAPTER_CONFIG,
                    "source_sha": None,
                }
            )
            if line in heads:
                parents.append({"commit_id": cid, "idx": 0, "parent_id": heads[line]})
            files.append(
                {
                    "commit_id": cid,
                    "path": "adapter_config.json",
                    "blob_id": hexid("cfg", g),
                    "size": 412,
                }
            )
            files.append(
                {
                    "commit_id": cid,
                    "path": "adapter_model.safetensors",
                    "blob_id": hexid("w", g),
                    "size": 79_998_048,
                }
            )
            is_release = line == LINE and pos == release_pos
            tensors += tensor_rows(cid, 32 if is_release else 1)
            tags = []
            if pos % TAG_EVERY == 0:
                tags.append(f"v{pos // TAG_EVERY}")
            if is_release:
                tags.append(TAG)
                release_id = cid
            for name in tags:
                history.append(
                    {
                        "line": line,
                        "name": name,
                        "kind": "tag",
                        "action": "create",
                        "old": None,
                        "new": cid,
                        "by": "bench",
                        "at": at,
                        "reason": None,
                    }
                )
                refs.append(
                    {
                        "line": line,
                        "name": name,
                        "kind": "tag",
                        "target": cid,
                        "message": None,
                        "updated_at": at,
                        "entry": None,
                    }
                )
            heads[line] = cid
            counts[line] = pos + 1
            created.setdefault(line, at)
        with load.begin():
            conn = load
            conn.execute(s.commits.insert(), commits)
            if parents:
                conn.execute(s.commit_parents.insert(), parents)
            conn.execute(s.files.insert(), files)
            insert_tensors(conn, tensors)
            conn.execute(s.ref_history.insert(), history)
            conn.execute(s.refs.insert(), refs)
        totals["commits"] += len(commits)
        totals["commit_parents"] += len(parents)
        totals["files"] += len(files)
        totals["tensors"] += len(tensors)
        totals["refs"] += len(refs)
    with load.begin():
        load.execute(
            s.lines.insert(),
            [
                {
                    "name": name,
                    "kind": "adapter",
                    "head": head,
                    "commit_count": counts[name],
                    "created_at": created[name],
                }
                for name, head in heads.items()
            ],
        )
    load.close()
    if repo.db.dialect == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))
    totals["lines"] = len(heads)
    totals["bench_line_commits"] = n_bench
    totals["release"] = release_id
    totals["populate_s"] = time.perf_counter() - t0
    return totals


def calls_for(repo, release: str) -> dict:
    """The calls to time, checked once for the right answers."""
    from mint import api

    head = api.resolve(repo, LINE)
    assert api.resolve(repo, f"{LINE}@{TAG}") == release
    got = api.log(repo, LINE, 20)
    assert len(got) == 20 and got[0].id == head and got[1].id == got[0].parents[0], got[:2]
    detail = api.show(repo, f"{LINE}@{TAG}")
    assert detail.id == release and len(detail.tensors) == 448 and f"{LINE}@{TAG}" in detail.tags
    assert len(api.log(repo, None, 20)) == 20
    return {
        "log LINE -n 20": lambda: api.log(repo, LINE, 20),
        "resolve LINE@TAG": lambda: api.resolve(repo, f"{LINE}@{TAG}"),
        "show LINE@TAG": lambda: api.show(repo, f"{LINE}@{TAG}"),
        "log -n 20 (all lines)": lambda: api.log(repo, None, 20),
    }


def measure(catalogs: dict, runs: int) -> dict:
    """Seconds per API call, as a user calls them on an open repository. The calls and the
    catalog sizes are interleaved, so that noise from the shared machine falls on all alike."""
    calls = {key: calls_for(repo, release) for key, (repo, release) in catalogs.items()}
    times = {key: {name: [] for name in cs} for key, cs in calls.items()}
    for cs in calls.values():
        for fn in cs.values():
            for _ in range(3):
                fn()
    for _ in range(runs):
        for key, cs in calls.items():
            for name, fn in cs.items():
                times[key][name].append(c.timed(fn)[0])
    return times


@contextlib.contextmanager
def catalog(db: str, n: int):
    with c.temp_repo(db, "mint-bench-catalog") as (repo, tmp):
        yield repo


def run(sizes: list[int], dbs: list[str], runs: int, do_profile: bool = False) -> dict:
    results: dict = {"sizes": sizes, "runs": runs, "builds": {}, "times": {}, "profiles": {}}
    for db in dbs:
        with contextlib.ExitStack() as stack:
            catalogs = {}
            for n in sizes:
                repo = stack.enter_context(catalog(db, n))
                built = populate(repo, n)
                print(
                    f"  {db:>10} n={n:>7,}: populated in {built['populate_s']:.1f} s "
                    f"({built['tensors']:,} tensor rows, {built['refs']:,} tags)",
                    flush=True,
                )
                results["builds"][f"{db}/{n}"] = built
                catalogs[f"{db}/{n}"] = (repo, built["release"])
            results["times"].update(measure(catalogs, runs))
            if do_profile:
                results["profiles"][db] = profile_calls(catalogs[f"{db}/{max(sizes)}"][0])
    return results


def profile_calls(repo) -> dict:
    import cProfile
    import io
    import pstats

    from mint import api

    out = {}
    for name, fn in {
        "log": lambda: api.log(repo, LINE, 20),
        "show": lambda: api.show(repo, f"{LINE}@{TAG}"),
    }.items():
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(10):
            fn()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(10)
        out[name] = buf.getvalue()
    return out


def report(r: dict) -> str:
    sizes = r["sizes"]
    small, big = min(sizes), max(sizes)
    rows = []
    for key in next(iter(r["times"].values())):
        for db in sorted(
            {k.split("/")[0] for k in r["times"]}, key=["sqlite", "postgresql"].index
        ):
            meds = {
                n: c.median(r["times"][f"{db}/{n}"][key]) * 1000
                for n in sizes
                if f"{db}/{n}" in r["times"]
            }
            ratio = (
                meds[big] / meds[small]
                if small in meds and big in meds and small != big
                else float("nan")
            )
            ok = meds[big] < TARGET_MS and not (ratio == ratio and ratio > FLAT)
            informational = key.startswith("log -n 20 (all")
            rows.append(
                [
                    f"{key} [{db}]",
                    *(meds.get(n) for n in sizes),
                    f"{ratio:.2f}x" if ratio == ratio else "-",
                    f"< {TARGET_MS:.0f} ms, flat" if not informational else "(info)",
                    ("ok" if ok else "MISS"),
                ]
            )
    header = [
        "figure (median ms)",
        *(f"n={n:,}" for n in sizes),
        f"{big // 1000}k/{small // 1000}k",
        "target",
        "",
    ]
    return c.table(f"Catalog: in-process API calls, medians of {r['runs']} calls", header, rows)


def main(argv: list[str] | None = None) -> dict:
    args, sizes, dbs = c.sized_db_args(
        __doc__,
        "1000,100000",
        "commit counts, comma-separated",
        "cProfile log and show at the largest size",
        argv,
    )
    t0 = time.perf_counter()
    r = run(sizes, dbs, args.runs, args.profile)
    r["wall_s"] = time.perf_counter() - t0
    print(report(r))
    for db, profs in r["profiles"].items():
        for name, text in profs.items():
            print(f"\nProfile of 10 x {name} [{db}], n={max(sizes):,}:\n{text}")
    path = c.write_json("bench_catalog", r)
    print(f"\n(results in {path.relative_to(c.REPO_ROOT)}; {r['wall_s']:.0f} s)")
    return r


if __name__ == "__main__":
    main()
