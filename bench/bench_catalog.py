#!/usr/bin/env python
"""The catalog at a million: catalog queries at 10^4 and 10^6 commits, on SQLite and PostgreSQL.

Figures (issue 12, "The catalog at a million"): `log LINE -n 20`, `show`, revision resolution
(LINE@TAG, LINE~10, a hex prefix), `ls`, `status`, `history LINE@CHANNEL -n 20` (also a page
deep in the history, with --before), `promote` and `rollback`: p50 and p95 of 200 calls each,
in-process through `mint.api` (the repository open, no interpreter start-up). Target: under
10 ms p50 each, flat from the small catalog to the large one. `ls` and `status` list all
1,000 lines; a page of 50 (--limit 50 --after LINE) is timed too. `log -n 20` over every line
is timed for information.

The catalog (one shape, scaled by n): 1,000 lines (n/10 below 10^4), interleaved in time;
`bench` holds a tenth of the commits, every other line an equal share; each commit has its two
files and two tensor rows, and `bench@release` (the commit `show` reads) has the 448 tensor rows
of a 7B-shaped r=16 adapter. Every 10th commit of a line is tagged (n/10 tags), with its history
row. Every line has `staging` and `production` channels, and n/10 channel moves are spread
over them, a tenth on `bench@production` (10^4 of the 10^5 at 10^6): chains as promote and
rollback write them, a promote's `back` the entry it replaced, every 10th move a rollback.
Then, through the API: two contracts (`smoke` guards staging, `release` guards production
with a regression bound and `requires = ["staging"]`), 20 `bench` commits evaluated under both
and promoted to staging, one forced to production; the timed promote and rollback alternate on
`bench@production` among those 20, so the gate does its full work every time.

The rows go straight to the driver through the same schema that `mint init` migrates: in
transactions of 20,000 commits, `executemany` on SQLite and COPY on PostgreSQL (constraints
and indexes stay on; the values are converted by the columns' own SQLAlchemy types on SQLite).
PostgreSQL gets `VACUUM ANALYZE` after the load, as autovacuum would; SQLite gets nothing (mint
never runs ANALYZE). Both sizes of one database are open at once and their calls interleaved,
so the large/small ratio comes from one run.

    python bench/bench_catalog.py [--sizes 10000,100000] [--db sqlite,postgresql] [--runs 200]
    python bench/bench_catalog.py --sizes 10000,1000000      # the figures at a million
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

LINE = "bench"
TAG = "release"
LINES = 1000
TAG_EVERY = 10
MOVES_PER_COMMIT = 0.1  # channel moves: n/10
ROLLBACK_EVERY = 10
CHANNELS = ("staging", "production")
BATCH = 20_000
POOL = 20  # bench commits the timed promote and rollback move between
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
TARGET_MS = 10.0
FLAT = 1.5  # large/small p50 ratio that still counts as flat on a noisy machine
START = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
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
SMOKE = 'name = "smoke"\nchannel = "staging"\n[[metric]]\nname = "accuracy"\nmin = 0.5\n'
RELEASE = (
    'name = "release"\nchannel = "production"\nrequires = ["staging"]\n[[metric]]\n'
    'name = "accuracy"\nmin = 0.5\nmax_regression = 0.05\n'
)


def hexid(*parts) -> str:
    return hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()


def commit_id(g: int) -> str:
    return hexid("commit", g)


def tensor_rows(cid: str, layers: int | None) -> list[tuple]:
    """(commit_id, file, name, dtype, shape, sha256, nbytes, offset) rows: every module of
    LAYERS layers, or (None) one module's pair."""
    rows, offset = [], 0
    mods = [(i, m) for i in range(layers) for m in MODULES] if layers else [(0, "q_proj")]
    for i, mod in mods:
        group = "self_attn" if mod in MODULES[:4] else "mlp"
        fan_in, fan_out = SHAPES[mod]
        for part, (a, b) in (("lora_A", (16, fan_in)), ("lora_B", (fan_out, 16))):
            name = f"base_model.model.model.layers.{i}.{group}.{mod}.{part}.weight"
            sha = cid[:48] + f"{len(rows):016x}"
            shape = [a, b]
            rows.append(
                (cid, "adapter_model.safetensors", name, "BF16", shape, sha, a * b * 2, offset)
            )
            offset += a * b * 2
    return rows


# --- the shape of the catalog ------------------------------------------------------------


def plan(n: int, seed: int = 0) -> list[str]:
    """The line of each commit, in time order: `bench` holds n/10, the other lines the rest."""
    lines = max(2, min(LINES, n // 10))
    n_bench = max(1, n // 10)
    order = [LINE] * n_bench + [f"line-{k % (lines - 1):04d}" for k in range(n - n_bench)]
    random.Random(seed).shuffle(order)
    return order


class Bulk:
    """Rows straight to the database driver, through the schema's own tables: executemany on
    SQLite (values converted by the columns' SQLAlchemy types), COPY on PostgreSQL."""

    def __init__(self, conn):
        self.conn, self.dialect = conn, conn.dialect
        self.pg = conn.dialect.name == "postgresql"

    def insert(self, table, rows: list[tuple], columns: list[str] | None = None) -> None:
        if not rows:
            return
        cols = [table.c[name] for name in (columns or [c.name for c in table.columns])]
        names = ", ".join(f'"{c.name}"' for c in cols)
        if self.pg:
            self._copy(table.name, names, cols, rows)
            return
        procs = [c.type.bind_processor(self.dialect) for c in cols]
        if any(procs):
            rows = [tuple(p(v) if p else v for p, v in zip(procs, row)) for row in rows]
        marks = ", ".join("?" * len(cols))
        self.conn.exec_driver_sql(f"INSERT INTO {table.name} ({names}) VALUES ({marks})", rows)

    def _copy(self, table: str, names: str, cols, rows: list[tuple]) -> None:
        json_at = [i for i, c in enumerate(cols) if c.type._type_affinity.__name__ == "JSON"]
        raw = self.conn.connection.dbapi_connection
        with raw.cursor() as cur, cur.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
            for row in rows:
                if json_at:
                    row = list(row)
                    for i in json_at:
                        row[i] = None if row[i] is None else json.dumps(row[i])
                copy.write_row(row)


# --- loading --------------------------------------------------------------------------------


def populate(repo, n: int) -> dict:
    """Fill an empty, migrated catalog with n commits, their tags, and n/10 channel moves.
    Returns counts, the release commit's id, and the seconds it took."""
    import sqlalchemy as sa

    t0 = time.perf_counter()
    engine = repo.db.engine
    load = engine.connect()
    if repo.db.dialect == "sqlite":  # a page cache big enough for the indexes
        load.exec_driver_sql("PRAGMA cache_size=-524288")
    else:
        load.exec_driver_sql("SET synchronous_commit = off")
    load.commit()
    try:
        built = _load_commits(load, n)
        built.update(_load_channels(load, built.pop("recent"), n))
    finally:
        load.close()
    if repo.db.dialect == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))
    built["populate_s"] = time.perf_counter() - t0
    return built


def _load_commits(load, n: int) -> dict:
    from mint import schema as s
    from mint.bases import fingerprint

    fp = fingerprint(BASE_CONFIG)
    with load.begin():
        load.execute(
            s.bases.insert().values(
                name=BASE, fingerprint=fp, config=BASE_CONFIG, source=None, created_at=START
            )
        )
    order = plan(n)
    state = {"heads": {}, "counts": {}, "created": {}, "recent": {}, "release": None, "entry": 0}
    totals = dict.fromkeys(("commits", "tensors", "tags"), 0)
    for lo in range(0, n, BATCH):
        rows = _commit_batch(order, lo, min(n, lo + BATCH), fp, state)
        with load.begin():
            bulk = Bulk(load)
            for table in ("commits", "commit_parents", "files", "tensors", "ref_history", "refs"):
                bulk.insert(s.metadata.tables[table], rows[table])
        totals["commits"] += len(rows["commits"])
        totals["tensors"] += len(rows["tensors"])
        totals["tags"] += len(rows["refs"])
    lines = [
        (name, "adapter", head, state["counts"][name], state["created"][name])
        for name, head in state["heads"].items()
    ]
    with load.begin():
        Bulk(load).insert(s.lines, lines, ["name", "kind", "head", "commit_count", "created_at"])
    return {
        **totals,
        "lines": len(lines),
        "release": state["release"],
        "recent": state["recent"],
        "entries": state["entry"],
    }


def _commit_batch(order: list[str], lo: int, hi: int, fp: str, state: dict) -> dict:
    """The rows of commits LO..HI: commits, parents, files, tensors, and tags with history."""
    rows = {
        k: [] for k in ("commits", "commit_parents", "files", "tensors", "ref_history", "refs")
    }
    n_bench = order.count(LINE) if lo == 0 else state["n_bench"]
    state["n_bench"] = n_bench
    for g in range(lo, hi):
        line = order[g]
        pos = state["counts"].get(line, 0)
        cid, at = commit_id(g), START + dt.timedelta(seconds=g)
        meta = {"step": pos * 1000, "loss": round(2.0 / (pos + 1), 4)}
        message = f"training run {pos}: lr sweep"
        rows["commits"].append(
            (cid, "adapter", line, hexid("tree", g), BASE, fp, message, "bench", at, meta, {})
            + (PEFT, ADAPTER_CONFIG, None, None)
        )
        if line in state["heads"]:
            rows["commit_parents"].append((cid, 0, state["heads"][line]))
        rows["files"].append((cid, "adapter_config.json", hexid("cfg", g), 412))
        rows["files"].append((cid, "adapter_model.safetensors", hexid("w", g), 79_998_048))
        release = line == LINE and pos == n_bench // 2
        rows["tensors"] += tensor_rows(cid, 32 if release else None)
        tags = ([f"v{pos // TAG_EVERY}"] if pos % TAG_EVERY == 0 else []) + (
            [TAG] if release else []
        )
        for name in tags:
            state["entry"] += 1
            rows["ref_history"].append(
                (state["entry"], line, name, "tag", "create", None, cid, "bench", at)
                + (None, None, None, None)
            )
            rows["refs"].append((line, name, "tag", cid, None, at, state["entry"]))
        if release:
            state["release"] = cid
        state["heads"][line] = cid
        state["counts"][line] = pos + 1
        state["created"].setdefault(line, at)
        recent = state["recent"].setdefault(line, [])
        recent.append(cid)
        del recent[:-POOL]  # the channels move among each line's newest commits
    return rows


def _load_channels(load, recent: dict[str, list[str]], n: int) -> dict:
    """n/10 moves over every line's staging and production, a tenth on bench@production, as
    consistent chains (a promote's `back` is the entry it replaced; every 10th move is a
    rollback to the entry before); then the channel refs at each chain's top."""
    import sqlalchemy as sa

    from mint import schema as s

    total = max(1, int(n * MOVES_PER_COMMIT))
    channels = [(line, ch) for line in sorted(recent) for ch in CHANNELS]
    main = (LINE, "production")
    share = {ch: 0 for ch in channels}
    share[main] = max(1, total // 10)
    others = [ch for ch in channels if ch != main]
    random.Random(1).shuffle(others)  # moves land all over the names, not on the first lines
    for k in range(total - share[main]):
        share[others[k % len(others)]] += 1
    with load.begin():
        first = load.execute(sa.select(sa.func.max(s.ref_history.c.id))).scalar() or 0
    history, tops = _chains(share, recent, first + 1, n)
    refs = [
        (line, name, "channel", top[1], None, START + dt.timedelta(seconds=n), top[0])
        for (line, name), top in tops.items()
    ]
    with load.begin():
        bulk = Bulk(load)
        for lo in range(0, len(history), BATCH * 5):
            bulk.insert(s.ref_history, history[lo : lo + BATCH * 5])
        bulk.insert(s.refs, refs)
        if load.dialect.name == "postgresql":  # explicit ids: move the sequence past them
            load.execute(
                sa.text(
                    "SELECT setval(pg_get_serial_sequence('ref_history', 'id'), "
                    "(SELECT max(id) FROM ref_history))"
                )
            )
    return {"moves": len(history), "bench_production_moves": share[main], "channels": len(tops)}


def _chains(share: dict, recent: dict, next_id: int, n: int) -> tuple[list[tuple], dict]:
    """The history rows of every channel's chain, interleaved in time, and each top (id, new)."""
    entries: dict[int, tuple[str, int | None]] = {}  # id -> (new, back)
    tops: dict[tuple[str, str], tuple[int, str]] = {}
    done = {ch: 0 for ch in share}
    rows, k = [], 0
    pending = [ch for ch in share if share[ch]]
    while pending:
        for ch in pending:
            line, name = ch
            top = tops.get(ch)
            j = done[ch]
            old = top[1] if top else None
            back_of_top = entries[top[0]][1] if top else None
            if j % ROLLBACK_EVERY == ROLLBACK_EVERY - 1 and back_of_top is not None:
                new, back = entries[back_of_top]
                action = "rollback"
            else:
                pool = recent[line]
                new = pool[(j * 7 + 3) % len(pool)]
                if new == old and len(pool) > 1:
                    new = pool[(pool.index(new) + 1) % len(pool)]
                back, action = (top[0] if top else None), "promote"
            at = START + dt.timedelta(seconds=n, milliseconds=k)
            rows.append((next_id, line, name, "channel", action, old, new, "bench", at, None))
            rows[-1] += (None, [], back)
            entries[next_id] = (new, back)
            tops[ch] = (next_id, new)
            done[ch] += 1
            next_id += 1
            k += 1
        pending = [ch for ch in pending if done[ch] < share[ch]]
    return rows, tops


# --- the gate's contracts, and the commits the timed moves use -----------------------------


def prepare_moves(repo, tmp: Path) -> list[str]:
    """Contracts, and POOL bench commits evaluated under both, on staging, one on production."""
    from mint import api

    for name, text in (("smoke", SMOKE), ("release", RELEASE)):
        (tmp / f"{name}.toml").write_text(text)
        api.contract_add(repo, tmp / f"{name}.toml", by="bench")
    pool = [api.resolve(repo, f"{LINE}~{k}") for k in range(POOL)]
    for i, cid in enumerate(pool):
        for name in ("smoke", "release"):
            metrics = {"accuracy": 0.80 + (i % 5) * 0.01}  # within the regression bound
            api.record_evaluation(repo, cid, name, metrics, source="manual", by="bench")
        api.promote(repo, cid, "staging", by="bench")
    api.promote(repo, pool[0], "production", by="bench", force=True, reason="bench start")
    return pool


class Mover:
    """Promote and rollback of bench@production, alternately, each answer checked."""

    def __init__(self, repo, pool: list[str]):
        from mint import api

        self.api, self.repo, self.pool, self.k = api, repo, pool, 0
        self.holder, self.before = api.resolve(repo, f"{LINE}@production"), None

    def promote(self):
        self.k += 1
        cid = self.pool[self.k % len(self.pool)]
        if cid == self.holder:
            self.k += 1
            cid = self.pool[self.k % len(self.pool)]
        move = self.api.promote(self.repo, cid, "production", by="bench")
        assert move.action == "promote" and move.to == cid and move.from_ == self.holder, move
        self.before, self.holder = self.holder, cid

    def rollback(self):
        move = self.api.rollback(self.repo, f"{LINE}@production", by="bench")
        assert move.action == "rollback" and move.to == self.before, (move, self.before)
        self.holder = self.before


# --- the calls --------------------------------------------------------------------------------


def calls_for(repo, release: str, pool: list[str]) -> dict:
    """The calls to time, each checked once for the right answer."""
    from mint import api

    lines = [i.name for i in api.ls(repo)]
    middle = lines[len(lines) // 2]
    everything = api.history(repo, f"{LINE}@production")
    deep = everything[len(everything) // 2].id
    got = api.log(repo, LINE, 20)
    assert len(got) == 20 and got[1].id == got[0].parents[0], got[:2]
    detail = api.show(repo, f"{LINE}@{TAG}")
    assert detail.id == release and len(detail.tensors) == 448 and f"{LINE}@{TAG}" in detail.tags
    assert api.resolve(repo, release[:10]) == release
    page = api.status(repo, limit=50, after=middle)
    assert len(page) == min(50, len(lines) // 2 - 1) and page[0].name > middle, page[0]
    assert api.history(repo, f"{LINE}@production", n=20) == everything[-20:]
    mover = Mover(repo, pool)
    return {
        "log LINE -n 20": lambda: api.log(repo, LINE, 20),
        "log -n 20 (all lines)": lambda: api.log(repo, None, 20),
        "show LINE@TAG (448 tensors)": lambda: api.show(repo, f"{LINE}@{TAG}"),
        "resolve LINE@TAG": lambda: api.resolve(repo, f"{LINE}@{TAG}"),
        "resolve LINE~10": lambda: api.resolve(repo, f"{LINE}~10"),
        "resolve HEXPREFIX": lambda: api.resolve(repo, release[:10]),
        "ls (all lines)": lambda: api.ls(repo),
        "ls --limit 50 --after LINE": lambda: api.ls(repo, limit=50, after=middle),
        "status (all lines)": lambda: api.status(repo),
        "status --limit 50 --after LINE": lambda: api.status(repo, limit=50, after=middle),
        "history LINE@CH -n 20": lambda: api.history(repo, f"{LINE}@production", n=20),
        "history -n 20 --before MIDDLE": lambda: api.history(
            repo, f"{LINE}@production", n=20, before=deep
        ),
        "promote": mover.promote,
        "rollback": mover.rollback,
    }


INFO = ("log -n 20 (all lines)",)


def measure(catalogs: dict, runs: int) -> dict:
    """Seconds per API call. The calls and the catalog sizes are interleaved, so that noise
    from the shared machine falls on all alike; promote and rollback alternate."""
    calls = {
        key: calls_for(repo, release, pool) for key, (repo, release, pool) in catalogs.items()
    }
    times = {key: {name: [] for name in cs} for key, cs in calls.items()}
    for cs in calls.values():
        for _ in range(3):
            for fn in cs.values():
                fn()
    for _ in range(runs):
        for key, cs in calls.items():
            for name, fn in cs.items():
                times[key][name].append(c.timed(fn)[0])
    return times


@contextlib.contextmanager
def catalog(db: str, n: int):
    with c.temp_repo(db, "mint-bench-catalog") as (repo, tmp):
        yield repo, tmp


def run(sizes: list[int], dbs: list[str], runs: int, do_profile: bool = False) -> dict:
    results: dict = {"sizes": sizes, "runs": runs, "builds": {}, "times": {}, "profiles": {}}
    for db in dbs:
        with contextlib.ExitStack() as stack:
            catalogs = {}
            for n in sizes:
                repo, tmp = stack.enter_context(catalog(db, n))
                built = populate(repo, n)
                pool = prepare_moves(repo, tmp)
                print(f"  {db:>10} n={n:>9,}: {_built(built)}", flush=True)
                results["builds"][f"{db}/{n}"] = built
                catalogs[f"{db}/{n}"] = (repo, built["release"], pool)
            results["times"].update(measure(catalogs, runs))
            if do_profile:
                big = catalogs[f"{db}/{max(sizes)}"]
                results["profiles"][db] = profile_calls(calls_for(*big))
    return results


def _built(b: dict) -> str:
    return (
        f"loaded in {b['populate_s']:.0f} s ({b['lines']:,} lines, {b['tags']:,} tags, "
        f"{b['moves']:,} channel moves, {b['tensors']:,} tensor rows)"
    )


def profile_calls(calls: dict) -> dict:
    import cProfile
    import io
    import pstats

    out = {}
    for name in ("show LINE@TAG (448 tensors)", "promote"):
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(10):
            calls[name]()
            if name == "promote":
                calls["rollback"]()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(10)
        out[name] = buf.getvalue()
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def report(r: dict) -> str:
    sizes = r["sizes"]
    small, big = min(sizes), max(sizes)
    dbs = sorted({k.split("/")[0] for k in r["times"]}, key=["sqlite", "postgresql"].index)
    rows = []
    for key in next(iter(r["times"].values())):
        for db in dbs:
            t = {n: r["times"][f"{db}/{n}"][key] for n in sizes if f"{db}/{n}" in r["times"]}
            p50 = {n: pct(v, 0.5) * 1000 for n, v in t.items()}
            p95 = {n: pct(v, 0.95) * 1000 for n, v in t.items()}
            ratio = p50[big] / p50[small] if small in p50 and big in p50 and small != big else None
            ok = p50[big] < TARGET_MS and (ratio is None or ratio <= FLAT)
            cells = [f"{p50[n]:.2f} / {p95[n]:.2f}" for n in sizes]
            rows.append(
                [f"{key} [{db}]", *cells, f"{ratio:.2f}x" if ratio else "-"]
                + (["(info)", ""] if key in INFO else [f"< {TARGET_MS:.0f} ms, flat", _ok(ok)])
            )
    header = ["call (p50 / p95 ms)", *(f"n={n:,}" for n in sizes), "p50 large/small", "target", ""]
    title = f"Catalog: in-process API calls, p50 and p95 of {r['runs']} calls each"
    return c.table(title, header, rows)


def _ok(ok: bool) -> str:
    return "ok" if ok else "MISS"


RUNS = 200


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a.startswith("--runs") for a in argv):
        argv += ["--runs", str(RUNS)]
    args, sizes, dbs = c.sized_db_args(
        __doc__,
        "10000,100000",
        "commit counts, comma-separated (the figures at a million: 10000,1000000)",
        "cProfile show and promote at the largest size",
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
