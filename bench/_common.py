"""Shared helpers for the benchmark scripts: timing, tables, JSON output, PostgreSQL databases.

The machines these run on are shared and noisy: every figure is a median over several runs,
and each comparison against a baseline is measured in the same run, alternating the two.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
OUT_DIR = BENCH_DIR / "out"
REPO_ROOT = BENCH_DIR.parent

for _path in (
    REPO_ROOT,
    REPO_ROOT / "tests",
):  # run as `python bench/x.py`; share the tests' helpers
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from support.pgdb import PG_ADMIN_URL, pg_database  # noqa: E402,F401  (MINT_TEST_PG_URL selects the server)

# --- timing --------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """Seconds `fn` took, and what it returned."""
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def repeat(fn: Callable[[], object], runs: int, warmup: int = 1) -> list[float]:
    """Seconds per call for `runs` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    return [timed(fn)[0] for _ in range(runs)]


def sh(cmd: str) -> float:
    """Run a shell command line; seconds it took (wall, including the shell's start)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


# --- output --------------------------------------------------------------------


def fmt_num(value, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value != value:  # nan
        return "-"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    if abs(value) >= 100:
        return f"{value:,.0f}{unit}"
    if abs(value) >= 10:
        return f"{value:.1f}{unit}"
    return f"{value:.2f}{unit}"


def table(title: str, header: list[str], rows: list[list]) -> str:
    """A plain text table; every cell is already a string or is formatted by fmt_num."""
    cells = [[c if isinstance(c, str) else fmt_num(c) for c in row] for row in rows]
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)
    ]
    line = "  ".join("-" * w for w in widths)
    out = [title, "=" * len(title)]
    out.append(
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))
        )
    )
    out.append(line)
    for r in cells:
        out.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
            )
        )
    return "\n".join(out)


def verdict(ratio_or_value: float, target: float) -> str:
    return "ok" if ratio_or_value <= target else "MISS"


def environment() -> dict:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_json(name: str, payload: dict) -> Path:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / f"{name}.json"
    payload = {"environment": environment(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


# --- PostgreSQL ------------------------------------------------------------------


def pg_available() -> bool:
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(PG_ADMIN_URL, poolclass=sa.NullPool)
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:  # noqa: BLE001 - any failure means "not here"
        return False


def sized_db_args(description: str, sizes: str, sizes_help: str, profile_help: str, argv) -> tuple:
    """The options the catalog and gate benches share: --sizes, --db, --runs, --profile.

    Returns (args, sizes, dbs), dropping PostgreSQL with a note when it does not answer."""
    import argparse

    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sizes", default=sizes, help=sizes_help)
    p.add_argument(
        "--db", default=None, help="sqlite,postgresql (default: both, if PostgreSQL answers)"
    )
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--profile", action="store_true", help=profile_help)
    args = p.parse_args(argv)
    dbs = args.db.split(",") if args.db else ["sqlite", "postgresql"]
    if "postgresql" in dbs and not pg_available():
        print(
            f"PostgreSQL is not reachable at {PG_ADMIN_URL}: measuring SQLite only",
            file=sys.stderr,
        )
        dbs = [d for d in dbs if d != "postgresql"]
    return args, sorted(int(x) for x in args.sizes.split(",")), dbs


@contextlib.contextmanager
def temp_repo(db: str, prefix: str):
    """A fresh repository on SQLite or on a throwaway PostgreSQL database. Yields (repo, tmp)."""
    import shutil
    import tempfile

    from mint.repo import init

    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}-{db}-", dir=os.environ.get("MINT_BENCH_TMP")))
    try:
        with pg_database() if db == "postgresql" else contextlib.nullcontext(None) as url:
            repo, _ = init(tmp / "repo", url)
            try:
                yield repo, tmp
            finally:
                repo.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def chat_load(url: str, requests: list[list[dict]]) -> tuple[float, list[float], int, dict]:
    """Every client sends its requests one after the other, all clients at once.

    Returns (seconds for all, latency of each turn, failed requests, turns per route; the
    turns whose router could not answer, and that got the default, under "fallback")."""
    import collections

    import httpx

    latencies: list[float] = []
    failed = [0]
    routes: collections.Counter = collections.Counter()
    start = threading.Barrier(len(requests) + 1)

    def client(bodies: list[dict]) -> None:
        with httpx.Client(base_url=url, timeout=300) as http:
            start.wait()
            for body in bodies:
                t0 = time.perf_counter()
                try:
                    response = http.post("/v1/chat/completions", json=body)
                    ok = response.status_code == 200
                except httpx.HTTPError:
                    ok = False
                latencies.append(time.perf_counter() - t0)
                failed[0] += not ok
                if ok:
                    got = response.json()["mint"]
                    routes["fallback" if got["route_fallback"] else got["route"]] += 1

    threads = [threading.Thread(target=client, args=(bodies,)) for bodies in requests]
    for thread in threads:
        thread.start()
    start.wait()
    t0 = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - t0, latencies, failed[0], dict(routes)


def installed_env(tmp: Path) -> dict:
    """The environment of a `mint` process with its bytecode cached (in TMP), as an installed
    package has it."""
    env = {**os.environ, "MINT_USER": "bench", "PYTHONPYCACHEPREFIX": str(tmp / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def mint_process(repo_root: Path, tmp: Path) -> Callable[..., float]:
    """run(*ARGS): `mint --repo REPO_ROOT ARGS` as a new process; the seconds it took."""
    env = installed_env(tmp)
    mint = [str(Path(sys.executable).parent / "mint"), "--repo", str(repo_root)]

    def run(*args: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([*mint, *args], check=True, env=env, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0

    return run
