#!/usr/bin/env python
"""What a remote `push` and `promote` cost in code paths, requests and transactions (issue 20).

A tiny base and two adapters (mint.examples.tiny) are committed on line `chat` of a local
repository; a real `mint registry serve` (started here, over an empty repository) receives
them. Each operation is the real CLI run in this process, `mint --repo LOCAL push URL chat`
then `mint --repo URL promote chat --to staging`, and is measured as follows:

- functions, modules, module switches: a `sys.setprofile` hook sees every Python call the
  client makes while the command runs. Functions are the distinct code objects of mint's own
  modules that were called; modules the distinct mint modules they are in; a module switch is
  a call whose function is in another mint module than the previous mint call's. Calls into
  libraries (httpx, click, sqlalchemy...) are left out of these three, but counted in
  `all functions` (distinct code objects of any module). Every mint module is imported
  before the trace starts, so that no import's module body or class body counts.
- HTTP requests: every request the client sends (httpx.Client.send).
- transactions: the registry process is started through a small wrapper that counts each
  `Database.read()` and `Database.write()` it enters (every transaction mint opens goes
  through one of them; the webhook worker's own polling, on its thread, is left out), and
  the client's own, on the local repository, are counted the same way in this process.

The same script measures an older tree: run it with PYTHONPATH at that tree installed
(`pip install --no-deps --target DIR`), and the server it starts imports the same mint.

    python bench/bench_trace_ops.py [--json]
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# The registry process: count transactions into the file named by argv[1], then serve.
SERVER = """
import contextlib, os, sys, threading
fd = os.open(sys.argv.pop(1), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
from mint.db import Database

def counted(kind, original):
    @contextlib.contextmanager
    def transaction(self):
        if threading.current_thread().name != "mint-webhooks":
            os.write(fd, kind)
        with original(self) as conn:
            yield conn
    return transaction

Database.read = counted(b"r", Database.read)
Database.write = counted(b"w", Database.write)
from mint.cli import main
sys.argv[0] = "mint"
main()
"""


class Counts:
    """Transactions entered in this process (the client's, on its local repository)."""

    def __init__(self):
        self.read = self.write = 0

    def install(self) -> None:
        from mint.db import Database

        for kind in ("read", "write"):
            original = getattr(Database, kind)
            setattr(Database, kind, self._counted(kind, original))

    def _counted(self, kind, original):
        counts = self

        @contextlib.contextmanager
        def transaction(db):
            if threading.current_thread().name != "mint-webhooks":
                setattr(counts, kind, getattr(counts, kind) + 1)
            with original(db) as conn:
                yield conn

        return transaction


class Trace:
    """Every Python call while active: which mint functions and modules, and the switches."""

    def __init__(self):
        self.functions: set = set()
        self.every: set = set()
        self.modules: set[str] = set()
        self.switches = 0
        self._last: str | None = None

    def _hook(self, frame, event, arg) -> None:
        if event != "call":
            return
        code = frame.f_code
        if code.co_name == "<module>":
            return
        self.every.add(code)
        module = frame.f_globals.get("__name__", "")
        if module != "mint" and not module.startswith("mint."):
            return
        self.functions.add(code)
        self.modules.add(module)
        if self._last is not None and module != self._last:
            self.switches += 1
        self._last = module

    def __enter__(self) -> Trace:
        sys.setprofile(self._hook)
        threading.setprofile(self._hook)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        threading.setprofile(None)


def _import_all() -> None:
    """Import every module of mint, so that the trace sees calls, not imports."""
    import importlib
    import pkgutil

    import mint

    for info in pkgutil.walk_packages(mint.__path__, "mint."):
        if info.name == "mint.__main__" or (
            ".examples." in info.name and info.name != "mint.examples.tiny"
        ):
            continue
        with contextlib.suppress(Exception):
            importlib.import_module(info.name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(root: Path, counts_file: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-c", SERVER, str(counts_file), "--repo", str(root)]
    cmd += ["registry", "serve", "--host", "127.0.0.1", "--port", str(port)]
    log = open(root / "bench-registry.log", "wb")
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit(f"the registry did not start: {(root / 'bench-registry.log').read_text()}")


def run() -> dict:
    import httpx

    from mint import api
    from mint.cli import run_in_process
    from mint.examples import tiny

    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-trace-"))
    base = tiny.build_base(tmp / "tiny-llama")
    model, _ = tiny.load_base(base)
    local, _ = api.init(tmp / "local")
    api.base_add(local, "tiny-llama", base)
    for i in (1, 2):
        adapter = tiny.build_adapter(base, tmp / f"a{i}", seed=i, model=model)
        api.commit(local, "chat", adapter, f"v{i}", author="bench")
    remote, _ = api.init(tmp / "remote")
    argv = ["--repo", str(remote.root), "registry", "token", "create", "bench"]
    code, out, err = run_in_process([*argv, "--role", "admin", "--json"])
    assert code == 0, err
    os.environ["MINT_TOKEN"] = json.loads(out)["token"]
    remote.close()
    counts_file = tmp / "server-transactions"
    counts_file.touch()
    server, url = _serve(tmp / "remote", counts_file)
    client = Counts()
    client.install()
    sent: list[str] = []
    original = httpx.Client.send

    def send(self, request, **kwargs):
        sent.append(f"{request.method} {request.url.path}")
        return original(self, request, **kwargs)

    httpx.Client.send = send
    ops = {
        "push": ["--repo", str(local.root), "push", url, "chat"],
        "promote": ["--repo", url, "promote", "chat", "--to", "staging"],
    }
    out = {}
    _import_all()
    try:
        for name, command in ops.items():
            sent.clear()
            client.read = client.write = 0
            before = counts_file.read_bytes()
            with Trace() as trace:
                code, _, err = run_in_process(command)
            assert code == 0, f"{name}: {err}"
            after = counts_file.read_bytes()[len(before) :]
            out[name] = {
                "functions": len(trace.functions),
                "all functions": len(trace.every),
                "modules": len(trace.modules),
                "module switches": trace.switches,
                "HTTP requests": len(sent),
                "server read transactions": after.count(b"r"),
                "server write transactions": after.count(b"w"),
                "client read transactions": client.read,
                "client write transactions": client.write,
            }
    finally:
        httpx.Client.send = original
        server.terminate()
        server.wait(10)
        local.close()
    return out


if __name__ == "__main__":
    figures = run()
    if "--json" in sys.argv:
        print(json.dumps(figures, indent=2))
    else:
        import mint

        print(f"mint at {Path(mint.__file__).parent}")
        for name, row in figures.items():
            print(f"{name}:")
            for key, value in row.items():
                print(f"  {key:27} {value}")
