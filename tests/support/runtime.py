"""Builders shared by the runtime tests: one trained tiny MoL per test run, and set specs.

The demo (a tiny base, a trained router, four specialists, a degraded router) is built once
per test run (xdist's workers share it) and cached here, because every runtime test module
needs it and training takes half a minute on a busy machine. Specs are built by hand, as the
runtime receives them from `mint.api`; `commit_demo` commits the demo into a repository as a
user would.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from pathlib import Path

from mint.bases import fingerprint_path
from mint.errors import BlobCorrupt
from mint.ids import object_id
from mint.objects import AdapterFiles, SetSpec
from mint.runtime.loader import SharedBase
from mint.runtime.runtime import Runtime

_CACHE: dict[str, object] = {}


def demo(tmp_path_factory):
    """The trained demo files: built on first use by one process of the test run (under
    xdist the workers share one build, behind a file lock), then shared by every module."""
    if "demo" not in _CACHE:
        import torch

        torch.set_num_threads(1)  # far faster than two threads on a busy two-core machine
        _CACHE["demo"], _CACHE["random_router"] = _shared_build(tmp_path_factory, _train_demo)
    return _CACHE["demo"]


def _train_demo(root: Path) -> tuple:
    from mint.examples import train
    from mint.examples.tiny import build_adapter

    files = train.build_demo(root / "demo")
    return files, build_adapter(files.base, root / "random-router", seed=7)


def _shared_build(tmp_path_factory, build) -> object:
    """BUILD(folder)'s result, built once per test run: xdist workers share the run's base
    temporary folder, so the first to take the lock builds and the others read its result
    (a pickle of paths). Without xdist the folder is this process's own."""
    import fcntl
    import pickle

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = shared / "mol-shared", shared / "mol-shared.pickle"
    with open(shared / "mol-shared.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            result = build(folder)
            done.with_suffix(".tmp").write_bytes(pickle.dumps(result))
            done.with_suffix(".tmp").replace(done)
        return pickle.loads(done.read_bytes())


def random_router() -> Path:
    """A router adapter with random weights (never trained); needs `demo()` first."""
    return _CACHE["random_router"]


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def adapter_files(folder: str | Path, *, weights: str | Path | None = None) -> AdapterFiles:
    """An adapter folder as the runtime receives it; the commit id is derived from its bytes."""
    folder = Path(folder)
    weights = Path(weights or folder / "adapter_model.safetensors")
    config = json.loads((folder / "adapter_config.json").read_text())
    commit = object_id({"config": config, "weights": sha256_file(weights)})
    return AdapterFiles(commit_id=commit, config=config, weights=str(weights))


def store_blob(objects: Path, source: str | Path) -> Path:
    """Copy a file into an object-store layout (`objects/ab/cdef…`, read-only), as mint's
    store keeps blobs."""
    blob = sha256_file(source)
    target = objects / blob[:2] / blob[2:]
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        shutil.copyfile(source, target)
        os.chmod(target, 0o444)
    return target


def stored_adapter(objects: Path, folder: str | Path) -> AdapterFiles:
    """An adapter whose weights are read from a store blob (which `verify_blobs` can check)."""
    return adapter_files(
        folder, weights=store_blob(objects, Path(folder) / "adapter_model.safetensors")
    )


def verify_blobs(spec: SetSpec) -> None:
    """What the store's verify does: every member's weights must hash to their blob id."""
    for files in [spec.router, spec.summary, *spec.experts.values()]:
        path = Path(files.weights)
        expected = path.parent.name + path.name
        actual = sha256_file(path)
        if actual != expected:
            raise BlobCorrupt(expected, actual)


def serving(base_dir: str | Path, spec: SetSpec, **kwargs) -> Runtime:
    """A runtime on a freshly loaded base, serving `spec` (raises if `spec` cannot be staged)."""
    runtime = Runtime(SharedBase.load(base_dir), **kwargs)
    runtime.stage(spec)
    runtime.swap()
    return runtime


def ask_until(url: str, stop: threading.Event, results: list, text: str, **extra) -> None:
    """Ask the server at `url` about `text` until `stop` is set; append (started, finished,
    status, body) for every request. `extra` goes into the request body (`max_tokens`...)."""
    import httpx

    body = {"model": "macaron", "messages": [{"role": "user", "content": text}], **extra}
    with httpx.Client(base_url=url, timeout=120) as http:
        while not stop.is_set():
            started = time.time()
            response = http.post("/v1/chat/completions", json=body)
            results.append((started, time.time(), response.status_code, response.json()))


def make_spec(
    files,
    *,
    router: AdapterFiles | None = None,
    experts: dict[str, AdapterFiles] | None = None,
    labels: list[str] | None = None,
    default: str = "chat",
    name: str = "macaron",
    fingerprint: str | None = None,
) -> SetSpec:
    """A SetSpec over the demo's adapters (or the ones given); its id covers every member."""
    experts = experts or {label: adapter_files(path) for label, path in files.experts.items()}
    router = router or adapter_files(files.router)
    labels = labels or list(experts)
    body = {
        "name": name,
        "labels": labels,
        "default": default,
        "router": router.commit_id,
        "experts": {k: v.commit_id for k, v in experts.items()},
    }
    return SetSpec(
        id=object_id(body),
        name=name,
        base="base",
        base_fingerprint=fingerprint or fingerprint_path(files.base),
        protocol="mol/1",
        labels=labels,
        default=default,
        router=router,
        experts=experts,
        summary=experts.get("chat") or next(iter(experts.values())),
        route_prompt=files.route_prompt.read_text(),
        summary_prompt=files.summary_prompt.read_text(),
    )


def commit_demo(repo, files, folder: Path, routers: dict[str, Path], *, by: str) -> dict:
    """The trained demo FILES committed into REPO: the base, each expert on its line tagged
    v1, and for each of ROUTERS (name: adapter folder, in order) a commit on line `router` and
    a set `macaron` over it (both with the name as message), its mol.toml and prompts written
    in FOLDER. Returns {name: {"router": commit id, "set": set commit id}}, in ROUTERS' order."""
    from mint import api
    from mint.examples.demo import MOL

    api.base_add(repo, "tiny-llama", files.base)
    for label, path in files.experts.items():
        api.commit(repo, label, path, label, author=by)
        api.tag(repo, "v1", label, by=by)
    folder.mkdir(parents=True, exist_ok=True)
    for src in (files.route_prompt, files.summary_prompt):
        (folder / src.name).write_bytes(src.read_bytes())
    ids = {}
    for name, path in routers.items():
        router = api.commit(repo, "router", path, name, author=by).id
        (folder / "mol.toml").write_text(MOL.format(router=router))
        ids[name] = {
            "router": router,
            "set": api.set_commit(repo, folder / "mol.toml", name, author=by).id,
        }
    return ids


def committed_demo(repo, files, folder: Path) -> dict:
    """`commit_demo` with the trained router, its set `macaron` promoted to production.
    Returns {"set": id, "router": id}."""
    from mint import api

    ids = commit_demo(repo, files, folder, {"demo": files.router}, by="ann")["demo"]
    api.promote(repo, ids["set"], "production", by="ann")
    return ids
