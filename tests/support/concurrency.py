"""Many `mint` processes started at once, so that they reach the database together."""

from __future__ import annotations

import os
import subprocess
import sys
import time

# Each process imports mint, then sleeps until the shared start time.
LAUNCH = (
    "import sys, time; from mint.cli import main; "
    "time.sleep(max(0.0, float(sys.argv[1]) - time.time())); main(sys.argv[2:])"
)


def run_at_once(argvs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Run `mint ARGV` for each of ARGVS in its own process (MINT_USER=racer), all released
    at one moment 4 s from now; return their results in ARGVS' order."""
    start = time.time() + 4.0
    env = {**os.environ, "MINT_USER": "racer"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LAUNCH, str(start), *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    results = []
    for argv, p in zip(argvs, procs):
        out, err = p.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(argv, p.returncode, out, err))
    return results
