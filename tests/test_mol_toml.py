"""mol.toml as mint writes it back (a set's checkout): valid TOML for every Unicode string.

JSON's escapes are not TOML's: a character outside the Basic Multilingual Plane came out as
a surrogate pair (`\\ud83d\\ude00`), which TOML refuses, so the checkout could not be parsed.
"""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mint.commits.adapter import safe_relpath
from mint.errors import InvalidConfig, InvalidName, UnsafePath
from mint.refs import check_name
from mint.sets.mol import parse_mol, parse_mol_text, render_mol, toml_string

from support.loop import build_set
from support.texts import MACARON

pytestmark = pytest.mark.one_database(
    "sqlite", "the subject is the TOML mint writes; test_sets commits sets on both databases"
)


prop = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)

# Every Unicode scalar value (UTF-8's codec leaves out surrogates, which no file holds),
# with the characters TOML treats specially drawn often.
tricky = st.sampled_from(['"', "\\", "\x00", "\x7f", "\x1f", "\t", "\n", "\r", "😀", "\U0010ffff"])
text = st.text(st.one_of(st.characters(codec="utf-8"), tricky), max_size=16)


def config(name, base, labels, commits, route, summary) -> dict:
    return {
        "name": name,
        "protocol": "mol/1",
        "base": base,
        "router": {"adapter": commits[0], "labels": labels, "prompt": route, "default": labels[0]},
        "experts": {label: commits[i % len(commits)] for i, label in enumerate(labels)},
        "summary": {"adapter": commits[-1], "prompt": summary},
    }


@prop
@given(
    name=text,
    base=text,
    labels=st.lists(text, min_size=1, max_size=4, unique=True),
    commits=st.lists(text, min_size=1, max_size=3),
    route=text,
    summary=text,
)
def test_render_then_parse_gives_back_every_string(name, base, labels, commits, route, summary):
    cfg = config(name, base, labels, commits, route, summary)
    rendered = render_mol(cfg)
    assert tomllib.loads(rendered) == cfg
    assert "\\ud8" not in rendered.lower() and "\\udc" not in rendered.lower()


# What a set's layout allows: names and labels as check_name takes them, prompts relative
# paths inside the folder (any characters, the emoji among them).
def _name(name: str) -> bool:
    try:
        check_name("label", name)
    except InvalidName:
        return False
    return True


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,11}", fullmatch=True).filter(_name)


def _relative(path: str) -> bool:
    try:
        safe_relpath(path)
    except UnsafePath:
        return False
    return True


prompts = st.text(st.one_of(st.characters(codec="utf-8"), tricky), min_size=1, max_size=16).filter(
    _relative
)


@prop
@given(name=names, labels=st.lists(names, min_size=1, max_size=3, unique=True), route=prompts)
def test_a_set_layout_round_trips_through_parse_mol(tmp_path_factory, name, labels, route):
    cfg = config(name, "tiny-llama", labels, ["a" * 64, "b" * 64], route, "summary 😀.md")
    try:
        mol = parse_mol_text(render_mol(cfg), tmp_path_factory.getbasetemp())
    except InvalidConfig as exc:
        assert "collides" in str(exc), exc  # a prompt or label on a member's folder: refused
        return
    assert (mol.name, mol.labels, mol.route_prompt) == (name, labels, route)
    assert mol.summary_prompt == "summary 😀.md"


@pytest.mark.parametrize("bad", ["\ud800", "a\udfffb", "😀\ud83d"])
def test_a_lone_surrogate_is_refused_in_one_clear_line(bad):
    with pytest.raises(InvalidConfig, match="lone surrogate"):
        toml_string(bad)
    with pytest.raises(InvalidConfig, match="lone surrogate"):
        render_mol(config("macaron", "tiny-llama", ["chat"], ["c" * 64], bad, "s.md"))


def test_checkout_of_a_set_with_an_emoji_prompt_parses(repo, models, tmp_path, mint):
    """set commit with a prompt file named with an emoji; its checkout's mol.toml parses."""
    build_set(repo, models, tmp_path)
    folder = tmp_path / "emoji"
    folder.mkdir()
    route = "route 😀.md"
    (folder / "mol.toml").write_text(MACARON.replace('"route.md"', f'"{route}"'))
    (folder / route).write_text("Route the request to one expert. 🚀\n")
    (folder / "summary.md").write_text("Summarise the turn.\n")
    r = mint("set", "commit", folder / "mol.toml", "-m", "emoji prompt")
    assert r.code == 0, r
    set_id = r.out.strip()
    out = tmp_path / "out"
    r = mint("checkout", set_id, out)
    assert r.code == 0, r
    written = (out / "mol.toml").read_text(encoding="utf-8")
    assert tomllib.loads(written)["router"]["prompt"] == route
    mol = parse_mol(out / "mol.toml")
    assert mol.route_prompt == route
    assert (out / route).read_text() == "Route the request to one expert. 🚀\n"
