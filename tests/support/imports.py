"""`mint ARGS...` in a new process, as the console script runs it, with the modules it imported:
what the start-up tests and the early-commit tests check."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Runs `mint ARGS...` as the console script does, then prints the modules it imported.
WRAPPER = """
import json, runpy, sys
sys.argv = ["mint", *sys.argv[1:]]
try:
    runpy.run_module("mint", run_name="__main__")
finally:
    print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def imported_by(*args: str, env: dict | None = None, timeout: float = 300):
    """(the finished process, the set of modules it imported) of `mint ARGS...`."""
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return proc, set(json.loads(proc.stderr.strip().splitlines()[-1]))
