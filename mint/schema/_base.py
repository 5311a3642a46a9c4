"""The one MetaData every table of `mint.schema` is defined on, and the column types they share."""

from __future__ import annotations

import sqlalchemy as sa

METADATA = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

HEX = sa.String(64)
TS = sa.DateTime(timezone=True)
