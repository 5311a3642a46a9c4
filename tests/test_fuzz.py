"""Property-based fuzzing of every parser that takes outside input.

The property, for each: one clean error (a MintError, or the server's 4xx ApiError) or a
correct result; never an internal error; and a refusal changes nothing in the repository.
`make test` runs a few examples per parser; `make fuzz` runs MINT_FUZZ_EXAMPLES (2,000) each.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mint import api
from mint.errors import MintError, StoreError

from conftest import snapshot

pytestmark = pytest.mark.one_database(
    "sqlite", "the parsers refuse before any statement; make fuzz runs them longer"
)


EXAMPLES = int(os.environ.get("MINT_FUZZ_EXAMPLES", "60"))
LINES = itertools.count()
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 100,  # the short run in `make test` is the same every time
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

names = st.text(alphabet="abcxyz0123456789._-@~/\\ \x00é", max_size=24)
toml_scalars = st.one_of(
    st.text(max_size=12),
    st.integers(),
    st.floats(allow_nan=True),
    st.booleans(),
    st.lists(st.text(max_size=8), max_size=4),
)


def clean(call, *args):
    """Run CALL: a result, or a clean MintError/StoreError (returned). Anything else fails."""
    try:
        return call(*args)
    except (MintError, StoreError) as exc:
        return exc


# --- revisions ---------------------------------------------------------------------------


@pytest.fixture
def small_repo(repo, mint, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    assert mint("commit", "chat", models["a1"], "-m", "one").code == 0
    assert mint("commit", "chat", models["a2"], "-m", "two").code == 0
    assert mint("tag", "v1", "chat~1").code == 0
    return repo


@fuzz
@given(rev=st.one_of(names, st.from_regex(r"\A[a-z]{0,6}(@[a-z0-9]{0,8})?(~\d{0,3}){0,3}\Z")))
def test_revisions(small_repo, rev):
    before = snapshot(small_repo)
    got = clean(api.resolve, small_repo, rev)
    assert isinstance(got, (str, MintError)), got
    if isinstance(got, str):
        assert got in {c.id for c in api.log(small_repo)}
    assert snapshot(small_repo) == before


# --- mol.toml ----------------------------------------------------------------------------


def mol_tables():
    label = st.sampled_from(["chat", "agent", "router", "mol.toml", "x/y", "", "Chat", "ui"])
    return st.fixed_dictionaries(
        {},
        optional={
            "name": st.one_of(names, st.just("macaron")),
            "base": st.one_of(names, st.just("tiny-llama")),
            "protocol": st.sampled_from(["mol/1", "mol/2", ""]),
            "router": st.fixed_dictionaries(
                {},
                optional={
                    "adapter": names,
                    "labels": st.lists(label, max_size=4),
                    "prompt": st.sampled_from(
                        ["route.md", "../x.md", "chat/r.md", "/etc/passwd", ""]
                    ),
                    "default": label,
                },
            ),
            "experts": st.dictionaries(label, st.one_of(names, toml_scalars), max_size=4),
            "summary": st.fixed_dictionaries(
                {},
                optional={
                    "adapter": names,
                    "prompt": st.sampled_from(["summary.md", "router/x", "a\\b"]),
                },
            ),
        },
    )


def to_toml(table: dict) -> str:
    top = [f"{k} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict)]
    subs = [
        f"[{k}]\n" + "\n".join(f"{json.dumps(a)} = {json.dumps(b)}" for a, b in v.items())
        for k, v in table.items()
        if isinstance(v, dict)
    ]
    return "\n".join(top) + "\n" + "\n".join(subs) + "\n"


@fuzz
@given(table=mol_tables(), raw=st.text(max_size=200))
def test_mol_toml(table, raw):
    from mint.sets.mol import parse_mol_text

    for text in (to_toml(table), raw):
        got = clean(parse_mol_text, text, Path("/nonexistent"), "mol.toml")
        assert isinstance(got, MintError) or got.labels, got


# --- contract TOML -----------------------------------------------------------------------


@fuzz
@given(
    metric=st.dictionaries(
        st.sampled_from(["name", "min", "max", "max_regression", "other"]), toml_scalars
    ),
    top=st.dictionaries(
        st.sampled_from(["name", "channel", "requires", "approvals", "lines", "x"]), toml_scalars
    ),
    timeout=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text()),
)
def test_contract_toml(metric, top, timeout):
    from mint.gates.contracts import parse_contract

    table = {**top, "metric": [metric], "evaluator": {"command": ["true"], "timeout": timeout}}
    try:
        text = to_toml({k: v for k, v in table.items() if k not in ("metric", "evaluator")})
        text += "[[metric]]\n" + "\n".join(f"{k} = {json.dumps(v)}" for k, v in metric.items())
        text += f'\n[evaluator]\ncommand = ["true"]\ntimeout = {json.dumps(timeout)}\n'
        tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError):
        text = "name = ["  # not TOML: must still be one clean error
    got = clean(parse_contract, text, "c.toml")
    if not isinstance(got, MintError):
        for m in got["metrics"]:
            assert all(v == v and abs(v) != float("inf") for k, v in m.items() if k != "name")
        assert 0 < got["evaluator"]["timeout"] < float("inf")


# --- safetensors headers and adapter configs ---------------------------------------------


def header_bytes(header, data_len: int, declared: int | None) -> bytes:
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    n = len(raw) if declared is None else declared
    return struct.pack("<Q", n) + raw + b"\0" * data_len


tensor_entries = st.fixed_dictionaries(
    {},
    optional={
        "dtype": st.sampled_from(["F32", "BF16", "F16", "I8", "Q4", "", None]),
        "shape": st.lists(st.integers(-2, 6), max_size=3),
        "data_offsets": st.lists(st.integers(-4, 200), max_size=3),
    },
)


@fuzz
@given(
    header=st.one_of(
        st.dictionaries(st.text(max_size=10), tensor_entries, max_size=4),
        st.binary(max_size=40),
        st.lists(st.integers(), max_size=3),
    ),
    data_len=st.integers(0, 200),
    declared=st.one_of(st.none(), st.integers(0, 2**64 - 1)),
)
def test_safetensors_header(tmp_path, header, data_len, declared):
    from mint.commits.safetensors import read_header

    path = tmp_path / "w.safetensors"
    path.write_bytes(header_bytes(header, data_len, declared))
    got = clean(read_header, path)
    if not isinstance(got, MintError):
        assert sum(t.end - t.start for t in got.tensors) == data_len


@fuzz
@given(
    config=st.dictionaries(
        st.sampled_from(
            [
                "peft_type",
                "r",
                "lora_alpha",
                "target_modules",
                "rank_pattern",
                "base_model_name_or_path",
                "modules_to_save",
            ]
        ),
        st.one_of(toml_scalars, st.dictionaries(st.text(max_size=6), st.integers(), max_size=2)),
    ),
)
def test_adapter_config(tmp_path_factory, models, config):
    import shutil

    from mint.commits.adapter import check_tensors, scan_adapter

    folder = tmp_path_factory.mktemp("cfg")
    shutil.copy(models["a1"] / "adapter_model.safetensors", folder)
    base = json.loads((models["a1"] / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**base, **config}))
    got = clean(scan_adapter, folder)
    if not isinstance(got, MintError):
        assert check_tensors(folder, got.config, got.header) == got.peft


# --- --meta and the other KEY=VALUE options -----------------------------------------------


@fuzz
@given(pairs=st.lists(st.text(max_size=16), max_size=4))
def test_meta_pairs(small_repo, mint, models, pairs):
    before = snapshot(small_repo)
    args = [a for p in pairs for a in ("--meta", p)]
    line = f"meta-{next(LINES)}"  # a new line each time: the commit is always created
    r = mint("commit", line, models["a3"], "-m", "meta", *args, "--json")
    if r.code == 0:
        meta = api.show(small_repo, r.json()["id"]).meta
        assert meta == dict(p.split("=", 1) for p in pairs)
    else:
        assert r.code == 2 and "Traceback" not in r.err and len(r.err.splitlines()) == 1
        assert snapshot(small_repo) == before


# --- the server's request bodies ---------------------------------------------------------


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
chat_bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": json_values,
        "max_tokens": json_values,
        "stream": json_values,
        "messages": st.one_of(
            json_values,
            st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "role": st.sampled_from(["user", "assistant", "system", "tool", ""]),
                        "content": json_values,
                    },
                ),
                max_size=4,
            ),
        ),
    },
)


@fuzz
@given(
    body=st.one_of(chat_bodies, json_values),
    raw=st.binary(max_size=64),
    depth=st.integers(0, 3000),
)
def test_server_request_bodies(body, raw, depth):
    from mint.runtime.server import ApiError, parse_chat, parse_json

    for data in (json.dumps(body).encode(), raw, b"[" * depth + b"]" * depth):
        try:
            parse_chat(parse_json(data))
        except ApiError as exc:
            assert 400 <= exc.status < 500
