"""Shared fixtures: one database per test on SQLite and on the machine's PostgreSQL, tiny models.

Every test that takes `repo` (or `db_url`) runs twice: once on a SQLite file and once on a
PostgreSQL database of its own, empty and at the schema's head. PostgreSQL is never skipped:
if it cannot be reached the tests fail, and `.ci/run` fails with them. A module whose subject
is not the database (a page, a file format, HTTP, a harness's file) is marked
`one_database(NAME, WHY)` and runs on NAME only; WHY names the modules that run the database
code it passes through on both.

Each repository is a copy of one that `mint init` made once per test process (its `.mint`
folder: config, database, empty object store); a PostgreSQL database is migrated once, then
emptied after each test and handed to the next (`support.pgdb.DatabasePool`), because
migrating and dropping one per test cost more than most tests. `mint init` itself runs in
the tests whose subject it is (test_migrations, test_integrity, test_s3_repo) and in every
test that makes a second repository.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from mint import api
from mint.repo import DIRNAME, open_repo

from support.pgdb import DatabasePool

# torch on one thread in each test process and in all it starts (servers, the demo, the CLI):
# the suite runs one process per core, where a second thread per process only waits for the
# core that the other process holds. A test about threads sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def pg_pool(tmp_path_factory):
    """Migrated PostgreSQL databases for this test process (see support.pgdb)."""
    pool = DatabasePool(tmp_path_factory.mktemp("pg-pool"))
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory):
    """A repository that `mint init` made on SQLite, never written to: copied by `repo`."""
    root = tmp_path_factory.mktemp("sqlite-template") / "repo"
    api.init(root)[0].close()
    return root


DATABASES = ("sqlite", "postgresql")


@pytest.fixture(params=DATABASES)
def db_url(request):
    """None selects the embedded SQLite default; otherwise the URL of an empty PostgreSQL
    database at the schema's head, this test's alone."""
    if request.param == "sqlite":
        yield None
    else:
        pool = request.getfixturevalue("pg_pool")
        url, _ = pool.take()
        yield url
        pool.give_back(url)


@pytest.fixture
def repo(db_url, tmp_path, request):
    """A new, empty repository at tmp_path/repo on db_url's database."""
    r = _copy_of_empty(request, db_url, tmp_path / "repo")
    yield r
    r.close()


@contextlib.contextmanager
def repo_on(request, database: str, folder: Path):
    """A new, empty repository at FOLDER on DATABASE ("sqlite" or "postgresql": a database of
    the pool, given back after), for a fixture wider than a test (a module's world)."""
    pool = request.getfixturevalue("pg_pool") if database == "postgresql" else None
    url = pool.take()[0] if pool is not None else None
    r = _copy_of_empty(request, url, folder)
    try:
        yield r
    finally:
        r.close()
        if pool is not None:
            pool.give_back(url)


def _copy_of_empty(request, url: str | None, folder: Path):
    """The empty repository of URL's template (SQLite's when None), copied to FOLDER."""
    if url is None:
        template = request.getfixturevalue("sqlite_template")
    else:
        template = request.getfixturevalue("pg_pool").templates[url]
    shutil.copytree(template / DIRNAME, folder / DIRNAME)
    return open_repo(folder)


# --- tiny models (built once per session; nothing is downloaded) -------------


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """A tiny base and three adapters for it (two on one shape, one with r=8)."""
    from mint.examples import tiny

    root = tmp_path_factory.mktemp("models")
    base_dir = tiny.build_base(root / "tiny-llama")
    model, _ = tiny.load_base(base_dir)
    return {
        "base": base_dir,
        "a1": tiny.build_adapter(base_dir, root / "a1", seed=1, model=model),
        "a2": tiny.build_adapter(base_dir, root / "a2", seed=2, model=model),
        "a3": tiny.build_adapter(
            base_dir, root / "a3", seed=3, r=8, targets=("q_proj", "v_proj"), model=model
        ),
    }


@pytest.fixture
def adapter(models, tmp_path):
    """A private copy of adapter a1, free to be damaged by the test."""
    import shutil

    dest = tmp_path / "adapter"
    shutil.copytree(models["a1"], dest)
    return dest


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    """The trained demo MoL (a base, a router, four specialists), built once per session."""
    from support import runtime

    return runtime.demo(tmp_path_factory)


# --- sets and loops shared by several modules (built in support/) -------------


@pytest.fixture
def two_sets(repo, models, tmp_path):
    """macaron@production holds set v1; v2 (a newer chat expert) is committed beside it."""
    from support.loop import two_sets

    return two_sets(repo, models, tmp_path)


@pytest.fixture
def loop(repo, models, tmp_path):
    """macaron's v1 holds staging and production; contract `quality` guards staging with an
    evaluator and a [live] table. Returns (ids, score_router: router commit, score -> None)."""
    from support.loop import quality_loop

    return quality_loop(repo, models, tmp_path)


@pytest.fixture
def macaron(tmp_path, tmp_path_factory):
    """The demo MoL in a repository behind a registry: two sets (two routers), the first on
    macaron@canary. Yields (repo, registry, reader token, [set ids], demo files)."""
    from support.registry import create_token, running_registry
    from support.runtime import commit_demo
    from support.runtime import demo as demo_files

    files = demo_files(tmp_path_factory)  # not the fixture: these tests need no demo worker
    repo, _ = api.init(tmp_path / "repo")
    routers = {"good": files.router, "degraded": files.degraded_router}
    sets = [
        ids["set"]
        for ids in commit_demo(repo, files, tmp_path / "set", routers, by="tester").values()
    ]
    api.promote(repo, sets[0], "canary", by="tester")
    token = create_token(repo.root, "rita", "reader")
    with running_registry(repo.root) as registry:
        yield repo, registry, token, sets, files
    repo.close()


# --- running the real CLI in-process ------------------------------------------


class Result:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def json(self):
        import json

        return json.loads(self.out)

    def __repr__(self):
        return f"Result(code={self.code}, out={self.out[:300]!r}, err={self.err[:300]!r})"


@pytest.fixture
def mint(repo):
    """Run `mint --repo REPO ARGS...` through the real entry point; returns a Result."""
    from mint.cli import run_in_process

    def _run(*args: str) -> Result:
        return Result(*run_in_process(["--repo", str(repo.root), *map(str, args)]))

    return _run


def one_line_error(result: Result, expect: str | None = None, code: int | None = None) -> str:
    """Assert the CLI failed with exactly one line on stderr and no traceback."""
    assert result.code != 0, result
    if code is not None:
        assert result.code == code, result
    lines = [l for l in result.err.splitlines() if l.strip()]
    assert len(lines) == 1, result
    assert "Traceback" not in result.err
    if expect:
        assert expect.lower() in lines[0].lower(), result
    return lines[0]


def snapshot(repo) -> tuple:
    """Everything stored: blob ids and every table's rows. Equal snapshots: nothing changed."""
    from mint import schema

    blobs = tuple(sorted(repo.store.iter()))
    with repo.db.read() as conn:
        rows = tuple(
            (t.name, tuple(sorted(map(repr, conn.execute(sa.select(t)).all()))))
            for t in schema.metadata.sorted_tables
        )
    return blobs, rows


def refused(based, repo, args, expect):
    """Run the CLI with ARGS: it must fail with one line (EXPECT) and store nothing, not even
    a temporary file."""
    before = snapshot(repo)
    one_line_error(based(*args), expect)
    assert snapshot(repo) == before
    assert (
        not any((repo.store.root / "tmp").glob("*"))
        if (repo.store.root / "tmp").exists()
        else True
    )


def assert_whole(repo) -> None:
    """fsck clean; every line head, tag and channel names a commit whose blobs verify."""
    report = api.fsck(repo)
    assert report.ok, report.problems
    targets = [s.head for s in api.status(repo)]
    targets += [c for s in api.status(repo) for c in s.channels.values()]
    targets += [t.target for t in api.tag_list(repo)]
    for cid in targets:
        detail = api.show(repo, cid)
        for f in detail.files.values():
            repo.store.verify(f.sha256)
        for m in detail.members:
            api.show(repo, m.commit_id)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "one_database(name, why): this module's tests that run on both databases run on NAME"
        " only; WHY names the tests that run the same database code on both",
    )


def pytest_collection_modifyitems(config, items):
    _one_database(config, items)
    _groups(config, items)


def _one_database(config, items) -> None:
    """Deselect, in modules (or tests) marked `one_database(NAME, WHY)`, the tests on the other
    database (by `db_url` or a module's own fixture over both): their subject is not the
    database (HTTP, a file format, a protocol), or one run already meets both, and WHY names
    where the database code they pass through runs on both."""
    kept, dropped = [], []
    for item in items:
        mark = item.get_closest_marker("one_database")
        params = getattr(getattr(item, "callspec", None), "params", {}).values()
        databases = {p for p in params if isinstance(p, str) and p in DATABASES}
        if mark is not None:
            name, why = mark.args
            assert name in DATABASES and len(why.split()) >= 4, mark
        other = mark is not None and databases and mark.args[0] not in databases
        (dropped if other else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _groups(config, items) -> None:
    """Under `--dist loadgroup`, tests on the trained demo MoL, or on a module-scoped fixture
    of their module, without a group of their own run on one worker per module, so that
    their module's fixtures (a loaded runtime, a server, a harness's run) are built once; the
    demo itself is trained once per run (support.runtime).

    Then every group is written into the test's node id, as pytest-xdist does and the
    scheduler reads: xdist 3.8 writes it to `item._nodeid`, which pytest 9 no longer reads,
    so without this every group (demo-loop, registry, both_ways...) was split over workers.
    Last, the groups that take minutes are put first (LONG_GROUPS)."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        if _builds_for_its_module(item) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
        groups = sorted(
            {
                str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                for m in item.iter_markers("xdist_group")
            }
        )
        suffix = "@" + "_".join(groups)
        if groups and not item.nodeid.endswith(suffix):
            _rename(item, item.nodeid + suffix)
    items.sort(key=_long_first)


# The groups that keep one worker busy for minutes (`python -m support.cpu` says which), in
# that order: xdist hands groups out in the order it meets them, and one of these met last
# would run alone while the other worker sat idle.
LONG_GROUPS = ("registry", "readme", "demo", "demo-loop", "fleet", "loop-faults")


def _long_first(item) -> int:
    group = item.nodeid.rpartition("@")[2]
    return LONG_GROUPS.index(group) if group in LONG_GROUPS else len(LONG_GROUPS)


def _builds_for_its_module(item) -> bool:
    """Whether ITEM uses the trained demo, or a module-scoped fixture of its own module (a
    harness run, a server): split over two workers, each would build it."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name) or ()
        if name == "demo" or any(
            d.scope == "module" and getattr(d.func, "__module__", None) == item.module.__name__
            for d in defs
        ):
            return True
    return False


def _rename(item, nodeid: str) -> None:
    """Give ITEM the node id NODEID, where this pytest keeps it."""
    if hasattr(item, "_id"):  # pytest 9: a structured NodeId
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(nodeid)
    else:
        item._nodeid = nodeid


# --- CPU per test (MINT_TEST_CPU=FILE): what to cut when the suite is slow ----------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With MINT_TEST_CPU set, append each test's CPU seconds (this process and the children
    it reaped meanwhile: the servers its fixtures stopped) and wall seconds to that file, one
    tab-separated line per test with its worker and when it ended; `python -m support.cpu
    FILE` sums them per module and says when each worker finished."""
    path = os.environ.get("MINT_TEST_CPU")
    if not path:
        yield
        return
    before, wall = _cpu(), time.perf_counter()
    yield
    cpu, wall = _cpu() - before, time.perf_counter() - wall
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(path, "a") as out:
        out.write(f"{item.nodeid}\t{cpu:.2f}\t{wall:.2f}\t{worker}\t{time.time():.1f}\n")


def _cpu() -> float:
    own, children = (
        resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
