#!/usr/bin/env python
"""Promote and rollback with a channel history of 100 and of 10,000 moves, on SQLite and
PostgreSQL.

Figure (issue 3, "Figures to measure"): promote and rollback inside the process (the API
calls `api.promote` and `api.rollback`, the repository already open), with a channel
history of 10,000 moves: target under 20 ms each, on SQLite and on PostgreSQL. They should
also stay flat from 100 moves to 10,000 (the `back` linked list makes a rollback one lookup).

Each catalog holds 20 tiny adapter commits on `chat` and a few on `code` and `vision`, and
two contracts: `smoke` guards `staging` (accuracy >= 0.5) and `release` guards `production`
(accuracy >= 0.5, at most 0.05 below the holder, and the commit must have held `staging`),
so the gate does real work: the guards, the commit's evaluation, the holder's evaluation and
the `staging` history lookup. Every commit is evaluated under both and promoted to `staging`
through the API. The first moves of each channel go through the API as well; the bulk of
the history is inserted with SQLAlchemy Core as one consistent chain: a promote's `back` is
the previous top entry, a rollback's (every 10th move) is the `back` of the entry it
restores, and `refs.entry`/`refs.target` point at the last one. `chat@production` (the
channel timed), `chat@staging`, `code@production` and `code@staging` each get N moves,
interleaved in time.

Timed: promote of a passing commit to `chat@production` and rollback of `chat@production`,
alternately (so the history keeps growing while its depth stays put); both sizes of one
database are open at once and their calls interleaved, so the 10k/100 ratio comes from one run.
The plain baseline is a bare single-row `UPDATE refs SET target=...` in one write
transaction of the same database (mint's own connection set-up), as the denominator of
"x plain". PostgreSQL gets `VACUUM ANALYZE` after the load, as autovacuum would.

    python bench/bench_gates.py [--sizes 100,10000] [--db sqlite,postgresql] [--runs 30]
                                [--profile]
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

BASE = "tiny-llama"
HIDDEN = 64
R = 4
LINE = "chat"
CHANNEL = "production"
OTHER_LINES = {"code": 4, "vision": 2}  # line: commits
CHAT_COMMITS = 20
API_MOVES = 4  # moves per channel made through the API before the bulk insert
ROLLBACK_EVERY = 10
BATCH = 5000
TARGET_MS = 20.0
FLAT = 1.5  # 10k/100 median ratio that still counts as flat on a noisy machine

SMOKE = """name = "smoke"
channel = "staging"
[[metric]]
name = "accuracy"
min = 0.5
"""
RELEASE = """name = "release"
channel = "production"
requires = ["staging"]
[[metric]]
name = "accuracy"
min = 0.5
max_regression = 0.05
"""


# --- a tiny adapter, written without torch -------------------------------------------


def write_safetensors(path: Path, tensors: dict[str, tuple[list[int], bytes]]) -> None:
    header, offset, data = {}, 0, []
    for name, (shape, raw) in tensors.items():
        header[name] = {
            "dtype": "F32",
            "shape": shape,
            "data_offsets": [offset, offset + len(raw)],
        }
        offset += len(raw)
        data.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(data))


def write_adapter(folder: Path, seed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for k, mod in enumerate(("q_proj", "v_proj")):
        prefix = f"base_model.model.model.layers.0.self_attn.{mod}"
        a = struct.pack(f"<{R * HIDDEN}f", *((seed + k + i) % 7 * 0.01 for i in range(R * HIDDEN)))
        b = struct.pack(
            f"<{HIDDEN * R}f", *((seed + 3 * k + i) % 5 * 0.01 for i in range(HIDDEN * R))
        )
        tensors[f"{prefix}.lora_A.weight"] = ([R, HIDDEN], a)
        tensors[f"{prefix}.lora_B.weight"] = ([HIDDEN, R], b)
    write_safetensors(folder / "adapter_model.safetensors", tensors)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": R,
        "lora_alpha": 8,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": ["q_proj", "v_proj"],
        "base_model_name_or_path": BASE,
        "inference_mode": True,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


def write_base(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": 2 * HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "vocab_size": 256,
    }
    (folder / "config.json").write_text(json.dumps(config) + "\n")
    return folder


# --- building a catalog ---------------------------------------------------------------


def accuracy(i: int) -> float:
    return 0.80 + (i % 5) * 0.01  # within 0.05 of each other: every promote passes the gate


def setup(repo, tmp: Path) -> dict:
    """Commits, contracts, evaluations, and the first moves of every channel, all by the API."""
    from mint import api

    api.base_add(repo, BASE, write_base(tmp / "base"))
    adapter = tmp / "adapter"
    write_adapter(adapter, seed=0)
    (tmp / "smoke.toml").write_text(SMOKE)
    (tmp / "release.toml").write_text(RELEASE)
    api.contract_add(repo, tmp / "smoke.toml", by="bench")
    api.contract_add(repo, tmp / "release.toml", by="bench")
    commits: dict[str, list[str]] = {}
    for line, n in {LINE: CHAT_COMMITS, **OTHER_LINES}.items():
        for i in range(n):
            (adapter / "README.md").write_text(f"# {line} run {i}\n")
            cid = api.commit(repo, line, adapter, f"{line} run {i}", author="bench").id
            commits.setdefault(line, []).append(cid)
            for name in ("smoke", "release"):
                metrics = {"accuracy": accuracy(i)}
                api.record_evaluation(repo, cid, name, metrics, source="manual", by="bench")
            api.promote(repo, cid, "staging", by="bench")
    for line in (LINE, "code"):
        for i in range(API_MOVES):
            api.promote(repo, commits[line][i % len(commits[line])], CHANNEL, by="bench")
    return commits


def channel_state(conn, line: str, name: str) -> tuple[dict, int]:
    """The channel's entries so far {id: (new, back)} and its current top entry id."""
    from mint import schema as s

    h = s.ref_history.c
    rows = conn.execute(
        s.ref_history.select()
        .with_only_columns(h.id, h.new, h.back)
        .where(h.line == line, h.name == name, h.kind == "channel")
    ).all()
    top = (
        conn.execute(s.refs.select().where(s.refs.c.line == line, s.refs.c.name == name))
        .one()
        .entry
    )
    return {r.id: (r.new, r.back) for r in rows}, top


def populate(repo, commits: dict[str, list[str]], n: int) -> dict:
    """Bring chat/code @ staging/production to n moves each, one consistent chain per channel."""
    import sqlalchemy as sa

    from mint import schema as s

    t0 = time.perf_counter()
    engine = repo.db.engine
    channels = [(LINE, CHANNEL), (LINE, "staging"), ("code", CHANNEL), ("code", "staging")]
    with engine.begin() as conn:
        contract_ids = {r.channel: r.id for r in conn.execute(sa.select(s.contracts))}
        evals = {
            (r.commit_id, r.contract_id): r.id for r in conn.execute(sa.select(s.evaluations))
        }
        state = {ch: channel_state(conn, *ch) for ch in channels}
        next_id = conn.execute(sa.select(sa.func.max(s.ref_history.c.id))).scalar() + 1
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    need = {ch: n - len(state[ch][0]) for ch in channels}
    rows, k, moved = [], 0, {ch: 0 for ch in channels}
    while any(moved[ch] < need[ch] for ch in channels):
        for ch in channels:
            if moved[ch] >= need[ch]:
                continue
            line, name = ch
            entries, top = state[ch]
            cur_new, cur_back = entries[top]
            j = moved[ch]
            con = contract_ids["production" if name == CHANNEL else "staging"]
            if j % ROLLBACK_EVERY == ROLLBACK_EVERY - 1 and cur_back is not None:
                new, back = entries[cur_back]
                action = "rollback"
            else:
                pool = commits[line]
                new = pool[(j * 7 + 3) % len(pool)]
                if new == cur_new:
                    new = pool[(pool.index(new) + 1) % len(pool)]
                back, action = top, "promote"
            eid = next_id
            next_id += 1
            rows.append(
                {
                    "id": eid,
                    "line": line,
                    "name": name,
                    "kind": "channel",
                    "action": action,
                    "old": cur_new,
                    "new": new,
                    "by": "bench",
                    "at": start + dt.timedelta(seconds=k),
                    "reason": None,
                    "contract": con,
                    "evaluations": [evals[(new, con)]],
                    "back": back,
                }
            )
            entries[eid] = (new, back)
            state[ch] = (entries, eid)
            moved[ch] += 1
            k += 1
    with engine.begin() as conn:
        for lo in range(0, len(rows), BATCH):
            conn.execute(s.ref_history.insert(), rows[lo : lo + BATCH])
        for (line, name), (entries, top) in state.items():
            done = conn.execute(
                s.refs.update()
                .where(s.refs.c.line == line, s.refs.c.name == name)
                .values(
                    target=entries[top][0], entry=top, updated_at=start + dt.timedelta(seconds=k)
                )
            )
            assert done.rowcount == 1
        if repo.db.dialect == "postgresql":  # explicit ids: move the sequence past them
            conn.execute(
                sa.text(
                    "SELECT setval(pg_get_serial_sequence('ref_history', 'id'), (SELECT max(id) "
                    "FROM ref_history))"
                )
            )
    if repo.db.dialect == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("VACUUM ANALYZE"))
    with engine.begin() as conn:
        counts = {f"{l}@{m}": len(channel_state(conn, l, m)[0]) for l, m in channels}
        total = conn.execute(sa.select(sa.func.count()).select_from(s.ref_history)).scalar()
    assert all(v == n for v in counts.values()), counts
    return {"moves": counts, "ref_history_rows": total, "populate_s": time.perf_counter() - t0}


@contextlib.contextmanager
def catalog(db: str, n: int):
    with c.temp_repo(db, "mint-bench-gates") as (repo, tmp):
        yield repo, tmp


# --- the calls ------------------------------------------------------------------------


class Mover:
    """Alternates promote and rollback of chat@production, checking each answer."""

    def __init__(self, repo, commits: list[str]):
        from mint import api

        self.repo, self.api, self.commits, self.k = repo, api, commits, 0
        self.holder = api.history(repo, f"{LINE}@{CHANNEL}", n=1)[-1].to
        self.before = None

    def promote(self):
        self.k += 1
        cid = self.commits[self.k % len(self.commits)]
        if cid == self.holder:
            self.k += 1
            cid = self.commits[self.k % len(self.commits)]
        self.before = self.holder
        move = self.api.promote(self.repo, cid, CHANNEL, by="bench")
        assert move.action == "promote" and move.to == cid and move.from_ == self.before, move
        self.holder = cid

    def rollback(self):
        move = self.api.rollback(self.repo, f"{LINE}@{CHANNEL}", by="bench")
        assert move.action == "rollback" and move.to == self.before, (move, self.before)
        self.holder = self.before


class Plain:
    """The baseline: a bare single-row UPDATE of a refs row in one write transaction."""

    def __init__(self, repo, commits: list[str]):
        import sqlalchemy as sa

        from mint import api
        from mint import schema as s

        api.tag(repo, "chat@baseline", commits[0], by="bench")
        self.repo, self.s, self.sa, self.commits, self.k = repo, s, sa, commits[:2], 0

    def __call__(self):
        self.k += 1
        s = self.s
        with self.repo.db.write() as conn:
            q = s.refs.update().where(s.refs.c.line == LINE, s.refs.c.name == "baseline")
            assert conn.execute(q.values(target=self.commits[self.k % 2])).rowcount == 1


def p90(values: list[float]) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, round(0.9 * (len(v) - 1)))] if v else float("nan")


def measure(catalogs: dict, runs: int) -> dict:
    """Seconds per call; the sizes and the calls interleaved so noise falls on all alike."""
    calls = {}
    for key, (repo, commits) in catalogs.items():
        mover, plain = Mover(repo, commits[LINE]), Plain(repo, commits[LINE])
        calls[key] = {"promote": mover.promote, "rollback": mover.rollback, "plain": plain}
    times = {key: {name: [] for name in cs} for key, cs in calls.items()}
    for cs in calls.values():
        for _ in range(3):
            for fn in cs.values():
                fn()
    for _ in range(runs):
        for key, cs in calls.items():
            for name, fn in cs.items():
                times[key][name].append(c.timed(fn)[0])
    from mint import api

    for key, (repo, _) in catalogs.items():  # for information: the whole audit trail, a page
        ref = f"{LINE}@{CHANNEL}"
        times[key]["history"] = c.repeat(lambda: api.history(repo, ref), 3)
        times[key]["history -n 20"] = c.repeat(lambda: api.history(repo, ref, n=20), runs)
    return times


def profile_calls(repo, commits: list[str], pairs: int = 20) -> str:
    """cProfile of PAIRS promote+rollback, and every SQL statement they ran, by total time."""
    import cProfile
    import io
    import pstats

    import sqlalchemy as sa

    stats: dict[str, list[float]] = {}
    started: list[float] = []

    def before(conn, cursor, statement, params, context, many):
        started.append(time.perf_counter())

    def after(conn, cursor, statement, params, context, many):
        key = " ".join(statement.split())[:150]
        stats.setdefault(key, []).append(time.perf_counter() - started.pop())

    mover = Mover(repo, commits)
    sa.event.listen(repo.db.engine, "before_cursor_execute", before)
    sa.event.listen(repo.db.engine, "after_cursor_execute", after)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(pairs):
        mover.promote()
        mover.rollback()
    prof.disable()
    sa.event.remove(repo.db.engine, "before_cursor_execute", before)
    sa.event.remove(repo.db.engine, "after_cursor_execute", after)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(12)
    calls = 2 * pairs
    n_stmt = sum(len(v) for v in stats.values())
    lines = [
        f"{n_stmt / calls:.1f} statements per call; by total time (ms per call, count per call):"
    ]
    for q, v in sorted(stats.items(), key=lambda kv: -sum(kv[1]))[:12]:
        lines.append(f"  {sum(v) * 1000 / calls:6.2f} ms  {len(v) / calls:4.1f}x  {q}")
    return "\n".join(lines) + "\n\n" + buf.getvalue()


def run(sizes: list[int], dbs: list[str], runs: int, do_profile: bool = False) -> dict:
    results: dict = {"sizes": sizes, "runs": runs, "builds": {}, "times": {}, "profiles": {}}
    for db in dbs:
        with contextlib.ExitStack() as stack:
            catalogs = {}
            for n in sizes:
                repo, tmp = stack.enter_context(catalog(db, n))
                t0 = time.perf_counter()
                commits = setup(repo, tmp)
                setup_s = time.perf_counter() - t0
                built = populate(repo, commits, n)
                built["setup_s"] = setup_s
                print(
                    f"  {db:>10} n={n:>6,}: API set-up {setup_s:.1f} s, history filled in "
                    f"{built['populate_s']:.1f} s "
                    f"({built['ref_history_rows']:,} ref_history rows)",
                    flush=True,
                )
                results["builds"][f"{db}/{n}"] = built
                catalogs[f"{db}/{n}"] = (repo, commits)
            results["times"].update(measure(catalogs, runs))
            if do_profile:
                repo, commits = catalogs[f"{db}/{max(sizes)}"]
                results["profiles"][db] = profile_calls(repo, commits[LINE])
    return results


def report(r: dict) -> str:
    sizes = r["sizes"]
    small, big = min(sizes), max(sizes)
    dbs = sorted({k.split("/")[0] for k in r["times"]}, key=["sqlite", "postgresql"].index)
    rows = []
    for name, label in (
        ("promote", "promote LINE@CHANNEL"),
        ("rollback", "rollback LINE@CHANNEL"),
        ("plain", "plain baseline: UPDATE refs"),
        ("history", "history LINE@CHANNEL (all)"),
        ("history -n 20", "history LINE@CHANNEL -n 20"),
    ):
        for db in dbs:
            t = {
                n: [x * 1000 for x in r["times"][f"{db}/{n}"][name]]
                for n in sizes
                if f"{db}/{n}" in r["times"]
            }
            meds = {n: c.median(v) for n, v in t.items()}
            ratio = (
                meds[big] / meds[small]
                if small in meds and big in meds and small != big
                else float("nan")
            )
            plain = c.median(r["times"][f"{db}/{big}"]["plain"]) * 1000
            timed_figure = name in ("promote", "rollback")
            ok = meds[big] < TARGET_MS and not (ratio == ratio and ratio > FLAT)
            rows.append(
                [
                    f"{label} [{db}]",
                    *(meds.get(n) for n in sizes),
                    p90(t[big]),
                    f"{ratio:.2f}x" if ratio == ratio else "-",
                    f"{meds[big] / plain:.1f}x" if name != "plain" else "1x",
                    f"< {TARGET_MS:.0f} ms, flat" if timed_figure else "(info)",
                    ("ok" if ok else "MISS") if timed_figure else "",
                ]
            )
    header = [
        "figure (median ms)",
        *(f"n={n:,}" for n in sizes),
        f"p90 n={big:,}",
        f"{big:,}/{small:,}",
        "x plain",
        "target",
        "",
    ]
    title = (
        "Gates: in-process promote/rollback, channel history of n moves, medians of "
        f"{r['runs']} calls"
    )
    return c.table(title, header, rows)


def main(argv: list[str] | None = None) -> dict:
    args, sizes, dbs = c.sized_db_args(
        __doc__,
        "100,10000",
        "moves in each channel's history, comma-separated",
        "cProfile and SQL statements at the largest size",
        argv,
    )
    t0 = time.perf_counter()
    r = run(sizes, dbs, args.runs, args.profile)
    r["wall_s"] = time.perf_counter() - t0
    print(report(r))
    for db, text in r["profiles"].items():
        print(f"\nProfile of 20 x (promote + rollback) [{db}], n={max(sizes):,}:\n{text}")
    path = c.write_json("bench_gates", r)
    print(f"\n(results in {path.relative_to(c.REPO_ROOT)}; {r['wall_s']:.0f} s)")
    return r


if __name__ == "__main__":
    main()
