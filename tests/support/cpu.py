"""`python -m support.cpu FILE [N]`: the CPU seconds per test module that a run with
MINT_TEST_CPU=FILE recorded (tests/conftest.py), the N most first, with their wall seconds."""

from __future__ import annotations

import sys
from collections import defaultdict


def main(path: str, n: int = 60) -> None:
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    for line in open(path):
        nodeid, c, w = line.rstrip("\n").split("\t")
        module = nodeid.split("::")[0]
        cpu[module] += float(c)
        wall[module] += float(w)
    print(f"{'cpu s':>8} {'wall s':>8}  module   (all: {sum(cpu.values()):.0f} s CPU)")
    for module in sorted(cpu, key=cpu.get, reverse=True)[:n]:
        print(f"{cpu[module]:8.1f} {wall[module]:8.1f}  {module}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
