#!/usr/bin/env python
"""How many HTTP requests a remote `mint push` makes (issue 20, "fewer round trips").

A tiny base and adapters (mint.examples.tiny) are committed on a line of a local repository;
a real `mint registry serve` runs over an empty one. The real CLI pushes (in this process) the
line first (two new commits, their blobs and the base), then once more after a third commit,
then once more with nothing new; every request the client sends is logged by wrapping
httpx.Client.send. Target: at most 3 per push (missing-blobs, upload, objects-and-head).

"before" is the figure of the client before the pack and the heads-with-objects request
(commit 35a4be3 measured it: GET /lines, POST /blobs/missing, one PUT per blob, POST
/objects, POST /lines/{line}/head when the line moves), computed from the blobs each push
sent; "after" is measured.

    python bench/bench_push_requests.py
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from support.registry import create_token, start_registry  # noqa: E402


def _shape(path: str) -> str:
    return re.sub(r"/[0-9a-f]{64}", "/{id}", path.split("?", 1)[0])


def before(blobs: int, moved: int) -> int:
    """The requests of the old client for a push of one line that sent BLOBS blobs and moved
    MOVED line heads: GET /lines, POST /blobs/missing, a PUT per blob, POST /objects, and a
    POST /lines/{line}/head per line that moved."""
    return 3 + blobs + moved


def run() -> dict:
    import httpx

    from mint import api
    from mint.cli import run_in_process
    from mint.examples import tiny

    tmp = Path(tempfile.mkdtemp(prefix="mint-bench-push-"))
    base = tiny.build_base(tmp / "tiny-llama")
    model, _ = tiny.load_base(base)
    adapters = [tiny.build_adapter(base, tmp / f"a{i}", seed=i, model=model) for i in (1, 2, 3)]
    local, _ = api.init(tmp / "local")
    api.base_add(local, "tiny-llama", base)
    for i, a in enumerate(adapters[:2]):
        api.commit(local, "chat", a, f"v{i}", author="bench")
    remote, _ = api.init(tmp / "remote")
    token = create_token(remote.root, "pusher", "admin")
    server = start_registry(remote.root)
    sent: list[str] = []
    original = httpx.Client.send

    def send(self, request, **kwargs):
        sent.append(f"{request.method} {_shape(request.url.path)}")
        return original(self, request, **kwargs)

    httpx.Client.send = send
    os.environ["MINT_TOKEN"] = token
    out = {}
    try:
        for label in ("first push", "push after one more commit", "push with nothing new"):
            if label == "push after one more commit":
                api.commit(local, "chat", adapters[2], "v2", author="bench")
            sent.clear()
            argv = ["--repo", str(local.root), "push", server.url, "chat", "--json"]
            code, stdout, err = run_in_process(argv)
            assert code == 0, err
            result = json.loads(stdout)
            moved = sum(1 for line in result["lines"] if line["moved"])
            out[label] = {
                "requests": len(sent),
                "before": before(result["blobs"], moved),
                "blobs": result["blobs"],
                "by_route": dict(collections.Counter(sent)),
            }
    finally:
        httpx.Client.send = original
        server.stop()
        local.close()
        remote.close()
    return out


if __name__ == "__main__":
    for label, figures in run().items():
        print(
            f"{label} ({figures['blobs']} blobs): {figures['requests']} requests "
            f"(before: {figures['before']})"
        )
        for route, n in figures["by_route"].items():
            print(f"  {n} x {route}")
