"""`mint` server processes started warm: forked from a parent that has already imported mint.

A `mint registry serve` spends about 3 CPU-seconds before its first answer, most of it
importing FastAPI, SQLAlchemy and mint's routes; the suite starts hundreds, on two cores. A
fork server (one per test process, started on first use) imports them once and forks a
process per start, which runs `mint ARGV...` through the real entry point (`mint.cli.main`)
with the test's environment, folder and log, as `python -m mint ARGV...` would. What a fork
does not give: a fresh interpreter's imports, which the tests that start `python -m mint` or
the installed `mint` script (test_package's wheel, the followers, the crash tests) keep.

The forked process is the test process's own child, as a `subprocess.Popen` one is: the fork
server forks twice and the test process is a child subreaper (prctl), so the server's
grandchild is re-parented to it; `Forked` waits for it by pid and gives its exit code as
`Popen` does (negative: the signal that ended it). `MINT_TEST_FORK=0` starts every server
with a plain `Popen` instead.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
# What both servers import when they start: uvicorn's parts, the databases' drivers, httpx.
SERVING = (
    "mint.cli",
    "uvicorn.main",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
    "anyio._backends._asyncio",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql.psycopg",
    "httpx",
)
# What a fork server imports before it forks, by what it starts: what `mint registry serve`
# and `mint serve` import before their first answer (no torch operation runs before a fork).
WARM = {
    "registry": SERVING
    + (
        "mint.registry.app",
        "mint.registry.web.actions",
        "mint.registry.web.approvals",
        "mint.registry.web.channel_api",
        "mint.registry.web.datasets",
        "mint.registry.web.evaluations",
        "mint.registry.web.pages",
        "mint.registry.web.tokens_page",
    ),
    "serve": SERVING
    + (
        "mint.cli.runtime_cmds",
        "mint.runtime.service",
        "mint.runtime.server",
        "mint.runtime.serving",
        "mint.runtime.engine",
        "mint.runtime.loader",
        "torch",
        "safetensors.torch",
        "transformers",
        "transformers.models.llama.modeling_llama",
        "peft",
    ),
}

# The fork server's program (run with `python -c`, so that its path is `python -m`'s).
# It reads one JSON request a line (argv, env, cwd, log), forks a child that forks the
# process that runs mint and exits at once, and answers that process's pid.
SERVER = r"""
import gc, json, os, signal, sys, importlib
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
gc.collect()
gc.freeze()
requests, answers = sys.stdin.buffer, sys.stdout.buffer
answers.write(b"ready\n"); answers.flush()
for line in requests:
    ask = json.loads(line)
    read_pid, write_pid = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read_pid)
        pid = os.fork()
        if pid:
            os.write(write_pid, str(pid).encode())
            os._exit(0)
        os.close(write_pid)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(ask["cwd"])
        os.environ.clear()
        os.environ.update(ask["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        mode = os.O_APPEND if ask["append"] else os.O_TRUNC
        log = os.open(ask["log"], os.O_WRONLY | os.O_CREAT | mode, 0o644)
        os.dup2(null, 0); os.dup2(log, 1); os.dup2(log, 2)
        os.close(null); os.close(log)
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin = open(0, "r", closefd=False)
        sys.stdout = open(1, "w", closefd=False, buffering=1 if unbuffered else -1)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        if "torch" in sys.modules and os.environ.get("OMP_NUM_THREADS", "").isdigit():
            sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        sys.argv = ["mint", *ask["argv"]]
        code = 0
        try:
            from mint.cli import main
            main(ask["argv"])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            if not isinstance(stop.code, (int, type(None))):
                print(stop.code, file=sys.stderr)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        try:
            import atexit
            atexit._run_exitfuncs()
            sys.stdout.flush(); sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(write_pid)
    os.waitpid(middle, 0)
    with os.fdopen(read_pid, "rb") as got:
        pid = got.read()
    answers.write(pid + b"\n"); answers.flush()
"""


class Forked:
    """A process the fork server started, this process's child: what the tests use of
    `subprocess.Popen` (pid, poll, wait, returncode)."""

    def __init__(self, pid: int, argv: list[str]):
        self.pid, self.args, self.returncode = pid, argv, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.01)
        return self.returncode


class _Server:
    def __init__(self, warm: tuple[str, ...]):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, json.dumps(warm)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout.readline() == b"ready\n", "the fork server did not start"
        self.lock = threading.Lock()
        atexit.register(self.close)

    def start(self, argv: list[str], env: dict, log: Path, cwd, append: bool) -> Forked:
        ask = {"argv": argv, "env": env, "log": str(log), "cwd": str(cwd or os.getcwd())}
        ask["append"] = append
        with self.lock:
            self.process.stdin.write(json.dumps(ask).encode() + b"\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
        if not answer.strip().isdigit():
            raise RuntimeError(f"the fork server failed: {answer!r}")
        return Forked(int(answer), argv)

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(10)


_servers: dict[str, _Server] = {}


def enabled() -> bool:
    return os.environ.get("MINT_TEST_FORK", "1") != "0" and sys.platform == "linux"


def spawn(
    args: list[str], *, warm: str, env: dict, log: Path, append: bool = False
) -> Forked | subprocess.Popen:
    """`python -m mint ARGS...` with ENV as its environment, its stdout and stderr into LOG:
    forked from the WARM fork server, or (MINT_TEST_FORK=0) started as written."""
    if enabled():
        return start_mint(args, warm=warm, env=env, log=log, append=append)
    with open(log, "ab" if append else "wb") as out:
        argv = [sys.executable, "-m", "mint", *map(str, args)]
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def start_mint(
    argv: list[str],
    *,
    warm: str,
    env: dict,
    log: Path,
    cwd: Path | None = None,
    append: bool = False,
) -> Forked:
    """`mint ARGV...` in a process forked from the fork server that imported WARM[WARM], with
    ENV as its whole environment, its stdout and stderr into LOG (truncated, or appended to
    with APPEND), in CWD (this process's by default)."""
    server = _servers.get(warm)
    if server is None or server.process.poll() is not None:
        server = _servers[warm] = _Server(WARM[warm])
    return server.start([str(a) for a in argv], env, log, cwd, append)
