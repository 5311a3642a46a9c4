"""Shared fixtures: one database per test on SQLite and on the machine's PostgreSQL, tiny models.

Every test that takes `repo` (or `db_url`) runs twice: once on a SQLite file and once on a
fresh PostgreSQL database. PostgreSQL is never skipped: if it cannot be reached the tests
fail, and `.ci/run` fails with them.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from mint import api

from support.pgdb import pg_database


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """None selects the embedded SQLite default; otherwise a PostgreSQL URL."""
    if request.param == "sqlite":
        yield None
    else:
        with pg_database() as url:
            yield url


@pytest.fixture
def repo(db_url, tmp_path):
    r, _ = api.init(tmp_path / "repo", db_url)
    yield r
    r.close()


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
    import test_runtime_support

    return test_runtime_support.demo(tmp_path_factory)


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


def pytest_collection_modifyitems(items):
    """Tests on the trained demo MoL share one xdist worker, so it is trained once."""
    for item in items:
        if "demo" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("demo"))
