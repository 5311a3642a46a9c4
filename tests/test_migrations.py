"""The migrations are the schema: upgrading an empty database gives exactly the models."""

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from mint.db import Database, alembic_config, head_revision
from mint.schema import metadata

from conftest import one_line_error
from support.pgdb import pg_database


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request, tmp_path):
    """A database never migrated (the `db_url` fixture's are at head already)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        with pg_database() as url:
            yield url


def test_upgrade_head_matches_models(empty_url):
    url = empty_url
    never_migrated = Database(url)
    assert never_migrated.current_revision() is None
    never_migrated.dispose()
    command.upgrade(alembic_config(url), "head")
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(
            MigrationContext.configure(conn, opts={"compare_type": True}), metadata
        )
        version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
    engine.dispose()
    assert diff == []
    assert version == head_revision()


def test_old_schema_says_run_db_upgrade(repo, mint):
    command.downgrade(alembic_config(repo.db.url), "base")
    one_line_error(mint("log"), "mint db upgrade")
    r = mint("db", "upgrade")
    assert r.code == 0, r
    assert Database(repo.db.url).current_revision() == head_revision()
    assert mint("ls", "--json").json() == []
