"""Many `mint` processes released at one moment, so that they reach the database together."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Each process imports mint, says it is ready (a file of its own), then waits for the word
# to go: a line on its stdin, which is written to every process once all are ready.
LAUNCH = (
    "import pathlib, sys; from mint.cli import main; "
    "pathlib.Path(sys.argv[1]).touch(); sys.stdin.readline(); main(sys.argv[2:])"
)
READY_TIMEOUT = 120.0  # seconds for every process to import mint, on a busy machine


def run_at_once(argvs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    """Run `mint ARGV` for each of ARGVS in its own process (MINT_USER=racer), all released
    together once every one has imported mint; return their results in ARGVS' order."""
    env = {**os.environ, "MINT_USER": "racer"}
    with tempfile.TemporaryDirectory(prefix="mint-ready-") as folder:
        ready = [Path(folder) / str(i) for i in range(len(argvs))]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", LAUNCH, str(flag), *argv],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for flag, argv in zip(ready, argvs)
        ]
        deadline = time.monotonic() + READY_TIMEOUT
        while not all(flag.exists() or p.poll() is not None for flag, p in zip(ready, procs)):
            assert time.monotonic() < deadline, "the processes never got ready"
            time.sleep(0.01)
        for p in procs:  # the word to go, to all of them at once
            with contextlib.suppress(BrokenPipeError):  # one that failed early has exited
                p.stdin.write("\n")
                p.stdin.flush()
        results = []
        for argv, p in zip(argvs, procs):
            out, err = p.communicate(timeout=120)
            results.append(subprocess.CompletedProcess(argv, p.returncode, out, err))
    return results
