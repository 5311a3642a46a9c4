"""Candidates one step from a channel's holder, and `set derive`."""

import pytest

from mint import api
from mint.errors import InvalidConfig, WrongKind

from conftest import one_line_error, snapshot
from support.loop import build_set


@pytest.fixture
def held(repo, models, tmp_path):
    """macaron@production holds the first set; router and coding get newer commits."""
    ids = build_set(repo, models, tmp_path)
    api.promote(repo, ids["set"], "production", by="alice")
    ids["router2"] = api.commit(repo, "router", models["a2"], "router v2", author="al").id
    ids["coding2"] = api.commit(repo, "coding", models["a1"], "coding v2", author="al").id
    return ids


def test_candidates_one_step_and_all_together(held, repo):
    ids = held
    found = api.candidates(repo, "macaron@production")
    base = {"router": ids["router"], "chat": ids["chat"], "coding": ids["coding"]}
    base["summary"] = ids["summary"]
    assert [c.lines for c in found] == [["router"], ["coding"], ["router", "coding"]]
    assert [c.changed for c in found] == [["router"], ["coding"], ["router", "coding"]]
    assert found[0].members == base | {"router": ids["router2"]}
    assert found[1].members == base | {"coding": ids["coding2"]}
    assert found[2].members == base | {"router": ids["router2"], "coding": ids["coding2"]}
    assert all(c.holder == ids["set"] and c.existing is None for c in found)
    assert found[2].uses == {"router": ids["router2"], "coding": ids["coding2"]}
    # only the lines asked for
    only = api.candidates(repo, "macaron@production", ["coding"])
    assert [c.lines for c in only] == [["coding"]]

    # derive the router swap: the expected members, parent the holder, found again after
    r = api.set_derive(repo, ids["set"], found[0].uses, author="loop")
    assert r.created and r.parents == [ids["set"]]
    shown = api.show(repo, r.id)
    assert {m.label: m.commit_id for m in shown.members} == found[0].members
    assert shown.config["router"]["adapter"] == ids["router2"]
    assert shown.provenance == {"derived_from": ids["set"], "uses": found[0].uses}
    assert api.set_spec(repo, r.id).router.commit_id == ids["router2"]
    again = api.candidates(repo, "macaron@production")
    assert [c.existing for c in again] == [r.id, None, None]
    same = api.set_derive(repo, ids["set"], {"router": "router"}, author="loop")
    assert not same.created and same.id == r.id

    # deriving from the holder when the head is elsewhere: the head is the second parent
    r2 = api.set_derive(repo, ids["set"], found[1].uses, author="loop")
    assert r2.parents == [ids["set"], r.id]
    assert api.resolve(repo, "macaron") == r2.id


def test_nothing_to_swap_and_bad_input(repo, models, tmp_path):
    ids = build_set(repo, models, tmp_path)
    api.promote(repo, ids["set"], "production", by="alice")
    assert api.candidates(repo, "macaron@production") == []
    before = snapshot(repo)
    with pytest.raises(InvalidConfig, match="no member labelled 'nope'"):
        api.set_derive(repo, ids["set"], {"nope": "chat"}, author="x")
    with pytest.raises(WrongKind):
        api.set_derive(repo, ids["set"], {"router": ids["set"]}, author="x")
    with pytest.raises(WrongKind):
        api.set_derive(repo, ids["chat"], {"router": "chat"}, author="x")
    with pytest.raises(InvalidConfig, match="line nowhere"):
        api.candidates(repo, "macaron@production", ["nowhere"])
    assert snapshot(repo) == before


def test_candidates_and_derive_cli(held, mint, repo):
    ids = held
    r = mint("candidates", "macaron@production", "--json")
    assert r.code == 0, r
    assert [c["changed"] for c in r.json()] == [["router"], ["coding"], ["router", "coding"]]
    text = mint("candidates", "macaron@production", "--line", "router")
    assert text.code == 0 and ids["router2"][:12] in text.out
    r = mint("set", "derive", "macaron@production", "--use", "router=router", "--json")
    assert r.code == 0, r
    assert api.show(repo, r.json()["id"]).config["router"]["adapter"] == ids["router2"]
    again = mint("set", "derive", "macaron@production", "--use", "router=router")
    assert again.code == 0 and "nothing to commit" in again.out
    before = snapshot(repo)
    one_line_error(mint("set", "derive", "macaron", "--use", "ghost=chat"), "no member labelled")
    one_line_error(mint("set", "derive", "macaron", "--use", "router"), "KEY=VALUE")
    one_line_error(mint("set", "derive", "macaron"), "--use")
    one_line_error(mint("candidates", "macaron@staging"), "unknown channel")
    one_line_error(mint("candidates", "macaron@production", "--line", "zzz"), "line zzz")
    assert snapshot(repo) == before
