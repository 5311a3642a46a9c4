"""Start-up (issue 24): `mint.objects` makes each dataclass on first use and `mint.schema`
builds each table on first use, yet every class and table is the one it was: the same name
and module, fields, pickling, type hints, DDL; `metadata` holds every table."""

from __future__ import annotations

import dataclasses
import json
import pickle
import subprocess
import sys
import typing

import pytest
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateTable

from mint import api, objects, schema

from support.imports import imported_by

# What `mint log` needs of the schema: the other tables' modules stay unloaded.
NOT_FOR_LOG = ("_gates", "_registry", "_deployment", "_signing", "_derived")


def fresh(code: str) -> str:
    """CODE's stdout, run in a new interpreter (nothing of mint imported before it)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("name", objects.__all__)
def test_each_object_is_a_frozen_dataclass_of_mint_objects(name):
    cls = getattr(objects, name)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert (cls.__module__, cls.__qualname__, repr(cls)) == (
        "mint.objects",
        name,
        f"<class 'mint.objects.{name}'>",
    )
    assert cls.__init__.__module__ == "mint.objects"
    hints = typing.get_type_hints(cls)
    assert set(hints) == {f.name for f in dataclasses.fields(cls)}
    assert pickle.loads(pickle.dumps(cls)) is cls


def test_an_object_pickles_and_compares_as_before():
    info = objects.CommitInfo("c" * 64, objects.Kind.ADAPTER, "chat", [], "m", "me", "t", {})
    back = pickle.loads(pickle.dumps(info))
    assert back == info and type(back) is objects.CommitInfo
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.line = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        objects.Nothing  # noqa: B018


def test_type_hints_resolve_whichever_class_is_asked_for_first():
    """Each class alone, in a new process: the classes its annotations name are made with it
    (`mint.exchange.wire` and the registry's models read them with `typing.get_type_hints`)."""
    out = fresh(
        "import json, sys, typing, importlib\n"
        "names = importlib.import_module('mint.objects').__all__\n"
        "made = {}\n"
        "for name in names:\n"
        "    for m in [m for m in sys.modules if m.startswith('mint.objects')]:\n"
        "        del sys.modules[m]\n"
        "    objects = importlib.import_module('mint.objects')\n"
        "    typing.get_type_hints(getattr(objects, name))\n"
        "    made[name] = sorted(k for k in vars(objects) if k in names)\n"
        "print(json.dumps(made))\n"
    )
    made = json.loads(out)
    assert set(made) == set(objects.__all__)
    assert made["CommitInfo"] == ["CommitInfo", "Decoration"]  # it and what it names, not 38
    assert made["CommitDetail"] == [
        "CommitDetail",
        "Dataset",
        "FileEntry",
        "Member",
        "TensorEntry",
    ]
    assert made["Verification"] == ["MemberVerified", "Signer", "Verification"]


def test_metadata_holds_every_table_with_the_same_ddl_as_the_modules_say():
    tables = {t for tables in schema.MODULES.values() for t in tables}
    assert (
        set(schema.metadata.tables) == tables and len(tables) == 34
    )  # 28, the fleet's 4, 2 of issue 37
    for module, names in schema.MODULES.items():
        for name in names:
            table = getattr(schema, name)
            assert table is schema.metadata.tables[name] is getattr(getattr(schema, module), name)
            CreateTable(table).compile(dialect=sqlite.dialect())
            for fk in table.foreign_keys:
                assert fk.column.table is schema.metadata.tables[fk.column.table.name]


def test_a_table_alone_comes_with_the_tables_its_foreign_keys_name():
    out = fresh(
        "import json\n"
        "from mint import schema\n"
        "t = schema.commit_signatures\n"
        "named = sorted(fk.column.table.name for fk in t.foreign_keys)\n"
        "print(json.dumps([sorted(t.metadata.tables), named]))\n"
    )
    loaded, named = json.loads(out)
    assert named == ["commits"] and set(named) <= set(loaded)
    assert "tokens" not in loaded  # the registry's tables: not loaded for this one


def test_log_loads_only_the_schema_it_reads(repo, models):
    api.base_add(repo, "tiny-llama", models["base"])
    api.commit(repo, "chat", models["a1"], "first", author="test")
    proc, modules = imported_by("--repo", str(repo.root), "log", "-n", "20")
    assert proc.returncode == 0 and proc.stdout, proc
    assert "mint.schema._commits" in modules
    assert [m for m in NOT_FOR_LOG if f"mint.schema.{m}" in modules] == []
