"""The migrations are the schema: upgrading an empty database gives exactly the models."""

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from mint.db import Database, alembic_config, head_revision
from mint.schema import metadata

from conftest import one_line_error


def _url(db_url, tmp_path):
    return db_url or f"sqlite:///{tmp_path / 'empty.db'}"


def test_upgrade_head_matches_models(db_url, tmp_path):
    url = _url(db_url, tmp_path)
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
