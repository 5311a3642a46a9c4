"""`make demo-loop`: cumulative improvement from deployment experience, end to end, offline.

A router trained on a small seed set serves a tiny Mixture-of-LoRA over HTTP. Simulated users
talk to it in phrasings the seed set lacks and say, for each answer, which expert should have
answered and how good it was. Each round, the loop exports routing examples from those traces
and that feedback, trains the next router on seed + traces, commits it naming the export it
learned from, and lets `mint improve` evaluate it under a contract, canary it beside
production and promote it on its live score. One round also meets a router trained on
mislabelled data, which the gate refuses. Routing accuracy on a fixed held-out set rises
round over round; the run fails (non-zero exit) if it does not, or if any step fails.

    python -m mint.examples.loop [--work DIR] [--summary FILE.json]

`--work` keeps the repository and files in DIR (default: a temporary folder, removed);
`--summary` (or MINT_LOOP_SUMMARY) writes the figures as JSON, for tests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from mint.examples.demo import Demo, Server
from mint.examples.loop_steps import (
    Loop,
    bootstrap,
    improve_round,
    measure,
    report,
    traffic,
)
from mint.examples.loop_users import Users
from mint.porcelain.improve import LOOP_IDENTITY


def main(argv: list[str] | None = None) -> int:
    from mint.examples.tiny import quiet_libraries

    parser = argparse.ArgumentParser(prog="python -m mint.examples.loop", description=__doc__)
    parser.add_argument("--work", type=Path, help="keep the repository and files here")
    parser.add_argument("--summary", type=Path, default=os.environ.get("MINT_LOOP_SUMMARY"))
    args = parser.parse_args(argv)
    os.environ.setdefault("MINT_USER", "alice")
    quiet_libraries()
    started = time.perf_counter()
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
        loop = run_loop(Loop(Demo(args.work)))
    else:
        with tempfile.TemporaryDirectory(prefix="mint-loop-") as tmp:
            loop = run_loop(Loop(Demo(Path(tmp))))
    seconds = time.perf_counter() - started
    summary = write_summary(loop, args.summary, seconds)
    print(f"\ndemo-loop finished in {seconds:.0f} s")
    return 0 if summary["ok"] else 1


def run_loop(loop: Loop) -> Loop:
    """Round 0, then two rounds of improvement, with one server throughout."""
    bootstrap(loop)
    with Server(loop.d, loop.base) as server:
        loop.server = server
        loop.users = Users(server.client, seed=7)
        measure(loop, 0, traffic(loop, 0))
        for number in (1, 2):
            improve_round(loop, number)
            measure(loop, number, traffic(loop, number))
        report(loop)
    return loop


def write_summary(loop: Loop, path: Path | None, seconds: float) -> dict:
    """The figures as JSON (to PATH if given); `ok` says whether accuracy rose each round and
    the bad candidate never held production at the end."""
    accuracy = [r.accuracy for r in loop.rounds]
    rising = len(accuracy) == 3 and all(a < b for a, b in zip(accuracy, accuracy[1:]))
    summary = {
        "rounds": [vars(r) for r in loop.rounds],
        "accuracy_rises": rising,
        "bad_candidate": loop.bad,
        "exports": loop.exports,
        "improves": loop.improves,
        "history": loop.history,
        "loop_identity": LOOP_IDENTITY,
        "seconds": round(seconds, 1),
    }
    summary["ok"] = rising and loop.bad.get("fate") in ("refused", "rolled back")
    if not rising:
        print(f"demo-loop: accuracy did not rise round over round: {accuracy}", file=sys.stderr)
    if path:
        Path(path).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


if __name__ == "__main__":
    sys.exit(main())
