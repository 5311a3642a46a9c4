"""`python -m support.cpu FILE [N]`: the CPU seconds per test module that a run with
MINT_TEST_CPU=FILE recorded (tests/conftest.py), the N most first, with their wall seconds;
the servers each module started (FILE.starts); and when each worker finished its last test
(a worker idle while the other runs a long group is time the run loses)."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from pathlib import Path


def main(path: str, n: int = 60) -> None:
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    ends: dict[str, tuple[float, str]] = {}
    first = None
    for line in open(path):
        nodeid, c, w, *when = line.rstrip("\n").split("\t")
        module = nodeid.split("::")[0]
        cpu[module] += float(c)
        wall[module] += float(w)
        if when:
            worker, end = when[0], float(when[1])
            first = min(first or end - float(w), end - float(w))
            ends[worker] = max(ends.get(worker, (0.0, "")), (end, nodeid))
    starts = Path(path + ".starts")
    started = Counter()
    if starts.exists():
        for line in starts.read_text().splitlines():
            test, kind = line.split("\t")
            started[(test.split("::")[0], kind)] += 1
    print(
        f"{'cpu s':>8} {'wall s':>8} {'starts':>14}  module   (all: {sum(cpu.values()):.0f} s CPU)"
    )
    for module in sorted(cpu, key=cpu.get, reverse=True)[:n]:
        kinds = ",".join(f"{k[0]}{started[(module, k)]}" for k in ("registry", "serve"))
        print(f"{cpu[module]:8.1f} {wall[module]:8.1f} {kinds:>14}  {module}")
    totals: Counter = Counter()
    for (_, kind), count in started.items():
        totals[kind] += count
    print("servers started:", dict(totals))
    for worker, (end, nodeid) in sorted(ends.items()):
        print(f"{worker}: last test ended {end - first:.0f} s after the first began ({nodeid})")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
