#!/usr/bin/env python
"""Production servers following a registry: time from `promote` (or `rollback`) returning to
the first request served by the new set, on 2 `mint --repo URL serve macaron@production`
processes under continuous chat load.

Figure (issue 11): p50 and p95 over ~10 moves (promotes and rollbacks alternating) and both
servers; target p95 under 1 s. Also shown: when each server's /healthz first named the new
set (the switch itself, without the request that follows it), the chat latency under load,
and failed requests (must be 0).

The demo's trained MoL (two sets: the good and the degraded router) is committed to a local
SQLite repository behind a real `mint registry serve`; the servers are the installed console
script with a reader token in MINT_TOKEN; moves are made through mint.api on the repository.

Each server runs torch on one thread (OMP_NUM_THREADS=1): two servers on a two-core machine
oversubscribe it otherwise.

    python bench/bench_follow.py [--moves 10] [--clients 1] [--max-tokens 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import _common as c  # noqa: E402
from support.registry import create_token, running_registry  # noqa: E402
from support.serving import Load, start_follower  # noqa: E402
from support.serving import Served as Follower  # noqa: E402

TARGET_P95_S = 1.0
ME = "bench"


def build_macaron(root: Path):
    """The demo's MoL in a new repository: (repo, [good set, degraded set], demo files)."""
    from mint import api
    from mint.examples import train
    from mint.examples.demo import MOL

    files = train.build_demo(root / "demo")
    repo, _ = api.init(root / "repo")
    api.base_add(repo, "tiny-llama", files.base)
    for label, folder in files.experts.items():
        api.commit(repo, label, folder, label, author=ME)
        api.tag(repo, "v1", label, by=ME)
    folder = root / "set"
    folder.mkdir()
    for src in (files.route_prompt, files.summary_prompt):
        (folder / src.name).write_bytes(src.read_bytes())
    sets = []
    for name, path in (("good", files.router), ("degraded", files.degraded_router)):
        router = api.commit(repo, "router", path, name, author=ME).id
        (folder / "mol.toml").write_text(MOL.format(router=router))
        sets.append(api.set_commit(repo, folder / "mol.toml", name, author=ME).id)
    api.promote(repo, sets[0], "production", by=ME)
    return repo, sets, files


class HealthWatch:
    """Polls every server's /healthz every 10 ms and keeps when each first named a commit."""

    def __init__(self, followers: list[Follower]):
        self.followers, self.seen = followers, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import httpx

        with httpx.Client(timeout=5) as client:
            while not self._stop.is_set():
                for f in self.followers:
                    try:
                        commit = client.get(f.url + "/healthz").json().get("commit")
                    except (httpx.HTTPError, ValueError):
                        continue
                    self.seen.append((f.url, time.monotonic(), commit))
                time.sleep(0.01)

    def first(self, url: str, commit: str, after: float) -> float | None:
        times = [t for u, t, s in list(self.seen) if u == url and s == commit and t > after]
        return min(times) if times else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def measure(repo, sets, followers, load, health, moves: int) -> list[dict]:
    """MOVES promotes and rollbacks, alternating; per move and server, the seconds from the
    move's return to the server's /healthz naming the new set and to its first answer."""
    from mint import api

    rows = []
    for n in range(moves):
        if n % 2 == 0:
            target, move = sets[1], lambda: api.promote(repo, sets[1], "production", by=ME)
        else:
            target, move = sets[0], lambda: api.rollback(repo, "macaron@production", by=ME)
        move()
        moved = time.monotonic()
        deadline = moved + 120
        for f in followers:
            while load.first_answer(f.url, target, moved) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{f.url} never answered from {target[:12]}")
                time.sleep(0.01)
            switched = health.first(f.url, target, moved)
            rows.append(
                {
                    "move": "promote" if n % 2 == 0 else "rollback",
                    "server": f.url,
                    "first_answer_s": load.first_answer(f.url, target, moved) - moved,
                    "healthz_s": None if switched is None else switched - moved,
                }
            )
        time.sleep(0.5)  # let both servers settle before the next move
    return rows


def run(moves: int = 10, clients: int = 1, max_tokens: int = 8, threads: int = 1) -> dict:
    from support import serving

    serving.BODY = {**serving.BODY, "max_tokens": max_tokens}
    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-follow-", dir=os.environ.get("MINT_BENCH_TMP")))
    followers: list[Follower] = []
    try:
        repo, sets, files = build_macaron(tmp)
        token = create_token(repo.root, "rita", "reader")
        with running_registry(repo.root) as registry:
            for n in range(2):
                followers.append(
                    start_follower(
                        registry.url,
                        token,
                        "macaron@production",
                        files.base,
                        tmp / f"f{n}",
                        {"OMP_NUM_THREADS": str(threads)},
                    )
                )
            load = Load([f.url for f in followers], clients).start()
            health = HealthWatch(followers)
            try:
                rows = measure(repo, sets, followers, load, health, moves)
            finally:
                load.stop()
                health.stop()
        repo.close()
    finally:
        for f in followers:
            f.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return summarise(rows, load)


def summarise(rows: list[dict], load: Load) -> dict:
    import statistics

    answers = sorted(r["first_answer_s"] for r in rows)
    switches = sorted(r["healthz_s"] for r in rows if r["healthz_s"] is not None)
    times = sorted(t for _, t, _ in load.answers)
    spans = [b - a for a, b in zip(times, times[1:])]

    def pct(values, q):
        return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")

    return {
        "moves": len(rows) // 2,
        "first_answer_p50_s": statistics.median(answers),
        "first_answer_p95_s": pct(answers, 0.95),
        "healthz_p50_s": statistics.median(switches) if switches else float("nan"),
        "healthz_p95_s": pct(switches, 0.95),
        "requests": len(load.answers),
        "failed_requests": len(load.failures),
        "failures": load.failures[:5],
        "answers_per_s": (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0,
        "gap_p50_s": statistics.median(spans) if spans else float("nan"),
        "target_p95_s": TARGET_P95_S,
        "rows": rows,
    }


def report(r: dict) -> str:
    rows = [
        ["first answer from the new set", r["first_answer_p50_s"], r["first_answer_p95_s"]],
        ["/healthz names the new set", r["healthz_p50_s"], r["healthz_p95_s"]],
    ]
    out = c.table(f"following: {r['moves']} moves x 2 servers (s)", ["", "p50", "p95"], rows)
    verdict = c.verdict(r["first_answer_p95_s"], TARGET_P95_S)
    return (
        f"{out}\n{r['requests']} requests answered ({r['answers_per_s']:.1f}/s in all), "
        f"{r['failed_requests']} failed; target p95 < {TARGET_P95_S} s: {verdict}"
    )


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--moves", type=int, default=10)
    p.add_argument("--clients", type=int, default=1, help="load clients per server")
    p.add_argument("--max-tokens", type=int, default=8, help="of each chat request")
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads of each server (OMP_NUM_THREADS)"
    )
    args = p.parse_args(argv)
    r = run(args.moves, args.clients, args.max_tokens, args.threads)
    print(report(r))
    c.write_json("bench_follow", r)
    return r


if __name__ == "__main__":
    main()
