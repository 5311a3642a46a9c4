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
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

BENCH_DIR = Path(__file__).resolve().parent
OUT_DIR = BENCH_DIR / "out"
REPO_ROOT = BENCH_DIR.parent

if str(REPO_ROOT) not in sys.path:  # run as `python bench/x.py` without installing
    sys.path.insert(0, str(REPO_ROOT))

PG_ADMIN_URL = os.environ.get(
    "MINT_BENCH_PG_URL",
    os.environ.get("MINT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
)


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
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    line = "  ".join("-" * w for w in widths)
    out = [title, "=" * len(title)]
    out.append("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths))))
    out.append(line)
    for r in cells:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
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


@contextlib.contextmanager
def pg_database(prefix: str = "mint_bench") -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards. Yields its URL."""
    import sqlalchemy as sa

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
