"""The metadata tables (SQLAlchemy Core). Alembic migrations are the only way they change.

`mint.schema.commits` and the others are defined in the modules of their concept, each
loaded when one of its tables is first asked for (PEP 562's module `__getattr__`), with the
tables its foreign keys name: building a table costs about 0.2 ms, and `mint log` needs three
of the 32 (issue 24). `metadata` is every table's: asking for it loads them all (create_all,
the migrations' checks, whatever walks `metadata.tables`).
"""

from __future__ import annotations

import importlib

import sqlalchemy as sa

from mint.schema._base import HEX as HEX
from mint.schema._base import METADATA
from mint.schema._base import TS as TS

# Each module's tables.
MODULES = {
    "_commits": ("lines", "commits", "commit_parents"),
    "_content": ("bases", "files", "tensors", "set_members"),
    "_refs": ("refs", "remote_refs", "ref_history"),
    "_gates": ("contracts", "evaluations", "approvals"),
    "_registry": ("tokens", "blob_grants", "protected_channels", "webhooks", "webhook_deliveries"),
    "_deployment": ("traces", "feedback", "datasets", "canaries"),
    "_signing": ("signing_keys", "commit_signatures", "move_signatures"),
    "_derived": ("commit_meta", "evaluation_metrics", "set_packs"),
    "_fleet": ("fleet_instances", "fleet_follows", "fleet_served", "fleet_failures"),
    "_proposals": ("proposals", "hub_uploads"),
}
_WHERE = {table: module for module, tables in MODULES.items() for table in tables}

__all__ = ["HEX", "TS", "metadata", *sorted(_WHERE)]


def __getattr__(name: str) -> sa.Table | sa.MetaData:
    if name == "metadata":
        for module in MODULES:
            importlib.import_module(f"{__name__}.{module}")
        value = METADATA
    elif name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
