"""The catalog bench_catalog.py, bench_registry.py and bench_web.py time: its shape, loaded
straight through the driver, and a cache of loaded catalogs so that a run at 10^6 commits
loads them once.

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
never runs ANALYZE).

The cache (`cached_catalog`): a catalog loaded once is kept, by database, size and SHAPE
version, under bench/out/cache/ (or $MINT_BENCH_CACHE) for SQLite and as a PostgreSQL database
named after the same key; each run times a copy (a file copy, or CREATE DATABASE ... TEMPLATE,
then written out: `_settle`), migrated to the schema's head first, so that the timed moves never
change the cached one. A new migration upgrades the cached catalog once, in place.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

SHAPE = 1  # bump when the catalog's shape changes: cached catalogs of another shape are not used
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


# --- the cache of loaded catalogs ------------------------------------------------------------

CACHE_DIR = Path(os.environ.get("MINT_BENCH_CACHE") or c.OUT_DIR / "cache")


def _key(db: str, n: int) -> str:
    return f"mint_bench_catalog_s{SHAPE}_{db}_{n}"


@contextlib.contextmanager
def cached_catalog(db: str, n: int):
    """A copy of the catalog of N commits on DB (sqlite or postgresql), loaded and prepared
    (`populate`, `prepare_moves`) the first time and cached. Yields (repo, tmp, built, pool):
    the copy's repository, a scratch folder, the load's counts and the timed moves' pool."""
    from mint.repo import init

    folder = CACHE_DIR / _key(db, n)
    if not (folder / "built.json").exists() or (db == "postgresql" and not _pg_has(_key(db, n))):
        _build(db, n, folder)
    cached, _ = init(folder / "repo")  # a migration added since the load: upgraded once, here
    cached.close()
    built = json.loads((folder / "built.json").read_text())
    tmp = Path(
        tempfile.mkdtemp(prefix=f"mint-bench-catalog-{db}-", dir=os.environ.get("MINT_BENCH_TMP"))
    )
    try:
        with _copy_db(db, folder, tmp) as url:
            repo, _ = init(tmp / "repo", url)
            try:
                yield repo, tmp, built, built["pool"]
            finally:
                repo.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build(db: str, n: int, folder: Path) -> None:
    from mint.repo import init

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    url = None
    if db == "postgresql":
        url = _pg_url(_key(db, n))
        _pg_admin(f'DROP DATABASE IF EXISTS "{_key(db, n)}" WITH (FORCE)')
        _pg_admin(f'CREATE DATABASE "{_key(db, n)}"')
    repo, _ = init(folder / "repo", url)
    try:
        built = populate(repo, n)
        built["pool"] = prepare_moves(repo, folder)
    finally:
        repo.close()
    (folder / "built.json").write_text(json.dumps(built) + "\n")


@contextlib.contextmanager
def _copy_db(db: str, folder: Path, tmp: Path):
    """The cached catalog's database copied for one run: yields the copy's URL (None: SQLite,
    whose database is the copied repository's own file)."""
    if db == "sqlite":
        shutil.copytree(folder / "repo", tmp / "repo")
        _settle(db)
        yield None
        return
    import uuid

    name = f"mint_bench_{uuid.uuid4().hex[:12]}"
    _pg_admin(f'CREATE DATABASE "{name}" TEMPLATE "{folder.name}"')
    _settle(db)
    try:
        yield _pg_url(name)
    finally:
        _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _settle(db: str) -> None:
    """Write the copy out before anything is timed: a copy of the 10^6 catalog leaves about
    3 GB of dirty pages (and on PostgreSQL as much WAL, then a checkpoint), and a timed move's
    commit, which waits for its own flush, would queue behind them for the next minute."""
    if db == "postgresql":
        _pg_admin("CHECKPOINT")
    os.sync()


def _pg_url(name: str) -> str:
    import sqlalchemy as sa

    url = sa.engine.make_url(c.PG_ADMIN_URL).set(database=name)
    return url.render_as_string(hide_password=False)


def _pg_admin(sql: str):
    import sqlalchemy as sa

    admin = sa.create_engine(c.PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            result = conn.execute(sa.text(sql))
            return result.all() if result.returns_rows else None
    finally:
        admin.dispose()


def _pg_has(name: str) -> bool:
    return bool(_pg_admin(f"SELECT 1 FROM pg_database WHERE datname = '{name}'"))
