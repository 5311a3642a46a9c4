#!/usr/bin/env python
"""The trace writer under a slow disk (issue 40): throughput and latency with the retry path,
and what a crash loses.

The recorder `mint serve` uses (`mint.runtime.service.recorder_for`) writes to a real SQLite
repository; rows are the size of a served turn's (a short conversation and answer). What a
request pays is `record()` (the answer is sent after it); what the writer does is measured as
rows stored per second and the lag from `record()` to stored.

1. **Retry path.** The same producer (RATE rows/s for SECONDS) runs plain and with another
   process holding the database's write lock two seconds in every three (past the writer's
   one-second wait: each held stretch costs a failed try and a retry), alternating which goes
   first, ROUNDS times. Printed: rows stored/s, record() p50/p99, lag p50/p99, the most rows
   pending, dropped; and the locked run's ratios to the plain one.
2. **Loss at a crash.** A child process records at RATE rows/s and is killed with SIGKILL at
   a random moment (KILLS times): plain, and after the lock has been held for HELD seconds.
   The rows it had acknowledged (a shared counter, bumped after each `record()`) minus the
   rows stored is what a crash loses; printed beside its bound (what waits in the queue: about
   RATE x (interval + a batch's write) plain, every row since the lock was taken under a lock,
   at most the queue's 10,000 rows / 64 MiB).

    python bench/bench_trace_writer.py [--rate 400] [--seconds 6] [--rounds 2] [--kills 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

LOCKER = """
import sqlite3, sys, time
held, free = float(sys.argv[2]), float(sys.argv[3])
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
while True:
    db.execute("BEGIN IMMEDIATE")
    time.sleep(held)
    db.execute("ROLLBACK")
    time.sleep(free)
"""


def row(n: int) -> dict:
    from mint.ids import utcnow

    return {
        "id": f"chatcmpl-{n}-{uuid.uuid4().hex[:12]}",
        "at": utcnow(),
        "set_line": "macaron",
        "set_commit": "ab" * 32,
        "variant": "production",
        "label": "coding",
        "probs": {"coding": 0.7, "chat": 0.2, "agent": 0.05, "ui": 0.05},
        "expert_commit": "cd" * 32,
        "user": f"user-{n % 60}",
        "messages": [{"role": "user", "content": f"please fix the python bug number {n}"}],
        "response": "Here is the fix: check the index before you read the list. " * 3,
        "latency": {"queue": 0.001, "route": 0.01, "answer": 0.05, "summary": 0.01, "total": 0.07},
    }


def new_repo(folder: Path):
    from mint import api

    repo, _ = api.init(folder)
    return repo


def stored(repo) -> int:
    import sqlalchemy as sa

    from mint import schema as s

    with repo.db.read() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(s.traces)).scalar()


# --- 1. throughput and latency, plain and with the retry path --------------------------------


def run_producer(repo, rate: float, seconds: float, locked: bool) -> dict:
    """RATE rows/s for SECONDS into a recorder on REPO; optionally with a locker process."""
    from mint.runtime.service import recorder_for

    locker = None
    if locked:
        db = repo.root / ".mint" / "mint.db"
        argv = [sys.executable, "-c", LOCKER, str(db), "2.0", "1.0"]
        locker = subprocess.Popen(argv)
    recorder = recorder_for(repo)
    acks, queued_at, peak = [], {}, 0
    lags: list[float] = []
    stop = threading.Event()
    base = stored(repo)

    def watch() -> None:  # when each row is stored, from the database (sampled)
        import sqlalchemy as sa

        from mint import schema as s

        seen: set[str] = set()
        while not stop.is_set() or len(seen) < len(queued_at) - recorder.dropped:
            with repo.db.read() as conn:
                ids = conn.execute(sa.select(s.traces.c.id)).scalars().all()
            now = time.perf_counter()
            for i in ids:
                if i in queued_at and i not in seen:
                    seen.add(i)
                    lags.append(now - queued_at[i])
            if stop.is_set() and recorder.pending() == 0 and len(seen) >= len(queued_at):
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    n = 0
    try:
        while (now := time.perf_counter()) - t0 < seconds:
            due = t0 + n / rate
            if due > now:
                time.sleep(due - now)
            r = row(n)
            a = time.perf_counter()
            recorder.record(r)
            queued_at[r["id"]] = time.perf_counter()
            acks.append(queued_at[r["id"]] - a)
            peak = max(peak, recorder.pending())
            n += 1
    finally:
        if locker is not None:
            locker.kill()
            locker.wait()
    recorder.close()
    elapsed = time.perf_counter() - t0
    stop.set()
    watcher.join(120)
    stats = recorder.stats()
    written = stored(repo) - base
    return {
        "rows": n,
        "stored": written,
        "rows_per_s": written / elapsed,
        "record_p50_us": c.median(acks) * 1e6,
        "record_p99_us": sorted(acks)[int(0.99 * (len(acks) - 1))] * 1e6,
        "lag_p50_s": c.median(lags),
        "lag_p99_s": sorted(lags)[int(0.99 * (len(lags) - 1))] if lags else float("nan"),
        "peak_pending": peak,
        "retries": stats["retries"],
        "dropped": stats["dropped"],
    }


# --- 2. what a crash loses ------------------------------------------------------------------


def _child(folder: str, rate: float, acked) -> None:
    from mint import api
    from mint.runtime.service import recorder_for

    repo = api.open_repo(folder)
    recorder = recorder_for(repo)
    t0, n = time.perf_counter(), 0
    while True:
        due = t0 + n / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        recorder.record(row(n))
        n += 1
        acked.value = n


def one_kill(folder: Path, rate: float, held: float | None) -> tuple[int, int]:
    """(acknowledged, stored) of a child killed after a random 1-3 s (plain), or HELD seconds
    into a held lock."""
    from mint import api

    ctx = mp.get_context("spawn")
    acked = ctx.Value("q", 0)
    child = ctx.Process(target=_child, args=(str(folder), rate, acked))
    child.start()
    while acked.value == 0:
        time.sleep(0.01)
    locker = None
    time.sleep(random.uniform(1.0, 3.0))
    if held is not None:
        db = sqlite3.connect(folder / ".mint" / "mint.db", isolation_level=None, timeout=60)
        db.execute("BEGIN IMMEDIATE")
        locker = db
        time.sleep(held)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    if locker is not None:
        locker.execute("ROLLBACK")
        locker.close()
    repo = api.open_repo(folder)
    try:
        return acked.value, stored(repo)
    finally:
        repo.close()


def losses(root: Path, rate: float, kills: int, held: float | None) -> list[int]:
    out = []
    for k in range(kills):
        folder = root / f"kill-{'held' if held else 'plain'}-{k}"
        new_repo(folder).close()
        acked, kept = one_kill(folder, rate, held)
        out.append(acked - kept)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=400.0, help="rows a second")
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--held", type=float, default=3.0, help="seconds the lock is held at a kill")
    args = p.parse_args()
    from mint.runtime.traces import MAX_PENDING

    runs: dict[str, list[dict]] = {"plain": [], "locked": []}
    with tempfile.TemporaryDirectory(prefix="mint-bench-tw-") as tmp:
        root = Path(tmp)
        repo = new_repo(root / "repo")
        for r in range(args.rounds):
            for mode in ("plain", "locked") if r % 2 == 0 else ("locked", "plain"):
                runs[mode].append(run_producer(repo, args.rate, args.seconds, mode == "locked"))
        repo.close()
        plain_loss = losses(root, args.rate, args.kills, None)
        held_loss = losses(root, args.rate, args.kills, args.held)

    def med(mode: str, key: str) -> float:
        return c.median([run[key] for run in runs[mode]])

    keys = ["rows_per_s", "record_p50_us", "record_p99_us", "lag_p50_s", "lag_p99_s"]
    rows = [[k] + [c.fmt_num(med(m, k)) for m in ("plain", "locked")] for k in keys]
    for k in ("peak_pending", "retries", "dropped"):
        rows.append([k] + [str(max(run[k] for run in runs[m])) for m in ("plain", "locked")])
    rows.append(
        ["stored / rows"]
        + [
            f"{sum(x['stored'] for x in runs[m])} / {sum(x['rows'] for x in runs[m])}"
            for m in ("plain", "locked")
        ]
    )
    print(
        c.table(
            f"trace writer at {args.rate:g} rows/s, {args.rounds} rounds of "
            f"{args.seconds:g} s (median)",
            ["", "plain", "lock held 2 s of 3"],
            rows,
        )
    )
    for k in ("rows_per_s", "record_p99_us", "lag_p99_s"):
        print(f"  {k}: locked / plain = {med('locked', k) / med('plain', k):.2f}")
    print(
        f"\nlost at SIGKILL, {args.kills} kills at {args.rate:g} rows/s:"
        f"\n  plain: {sorted(plain_loss)} (bound: what waits, ~rate x 0.5 s interval + a batch)"
        f"\n  {args.held:g} s into a held lock: {sorted(held_loss)} (bound: every row since the"
        f" lock, ~{args.rate * args.held:.0f} here; at most {MAX_PENDING} rows)"
    )
    c.write_json(
        "trace_writer",
        {"args": vars(args), "runs": runs, "plain_loss": plain_loss, "held_loss": held_loss},
    )


if __name__ == "__main__":
    main()
