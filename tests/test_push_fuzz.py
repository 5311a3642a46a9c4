"""Property-based test of `POST /api/v1/objects` against a real `mint registry serve`.

Each example starts from a payload the registry accepts (a base, an adapter commit, a set
pinning a commit already there, and an evaluation of the new commit) and puts arbitrary JSON
values (NaN, infinity, 2.0 where an integer was meant, integers of thousands of digits,
strings, lists, objects, a missing key) into some of its fields; commit ids are recomputed
from the changed content where that can be done, so that the values get past the id check.

The property: the registry answers 2xx or 4xx, never 5xx; whatever it accepts passes
`mint fsck` (which re-checks every evaluation as `mint eval` would) and reads back through
the API without an error. `make test` runs a few dozen examples; MINT_FUZZ_EXAMPLES more.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
from collections import Counter

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mint import api
from mint.cli import run_in_process
from mint.exchange import sending
from mint.ids import utcnow

from support.registry import create_token, start_registry
from support.texts import PROD
from support.wire import recompute_id_if_whole

EXAMPLES = int(os.environ.get("MINT_FUZZ_EXAMPLES", "40"))
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 100,  # the short run in `make test` is the same every time
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SERIAL = itertools.count()
ANSWERS: Counter = Counter()  # status -> examples: the property saw both kinds of answer
DELETE = object()  # a mutation that removes the key


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**4000), max_value=10**4000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2.0, 1e300, 2**31, 2**63, "2", "", "manual", "a" * 64]),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)

COMMIT = ("commits", 0)
SET = ("commits", 1)
EVAL = ("evaluations", 0)


def _paths() -> list[tuple]:
    keys = [
        "id", "kind", "line", "parents", "files", "base", "base_fingerprint", "message",
        "author", "created_at", "meta", "provenance", "peft", "config", "tensors", "members",
    ]  # fmt: skip
    out = [(*COMMIT, k) for k in keys] + [(*SET, k) for k in keys]
    out += [(*COMMIT, "files", "*", i) for i in (0, 1)]
    out += [(*COMMIT, "tensors", 0, i) for i in range(7)] + [(*COMMIT, "tensors", 0, 2, 0)]
    out += [(*SET, "members", 0, i) for i in range(4)]
    out += [(*EVAL, k) for k in ("commit", "contract", "metrics", "source", "evaluator")]
    out += [(*EVAL, k) for k in ("data_hash", "by", "at")]
    out += [(*EVAL, "contract", k) for k in ("name", "version", "source")]
    out += [(*EVAL, "metrics", "acc"), ("bases", 0, "name"), ("bases", 0, "config")]
    out += [("bases", 0, "fingerprint"), ("commits",), ("evaluations",), ("bases",)]
    return out


PATHS = _paths()
mutations = st.lists(
    st.tuples(st.sampled_from(PATHS), st.one_of(json_values, st.just(DELETE))),
    min_size=1,
    max_size=3,
)


class Target:
    """A registry over a repository with a base, prod v1 and a commit on `chat`."""

    def __init__(self, root, models):
        self.repo, _ = api.init(root)
        api.base_add(self.repo, "tiny-llama", models["base"])
        (root.parent / "prod.toml").write_text(PROD)
        api.contract_add(self.repo, root.parent / "prod.toml", by="ada")
        self.chat = api.commit(self.repo, "chat", models["a1"], "one", author="ann").id
        with self.repo.db.read() as conn:
            self.wire = sending.commit_wire(conn, self.chat)
            self.base = sending.export_objects(conn, [self.chat])["bases"][0]
        prompt = b"Route.\n"  # the sets' one prompt, stored as a push would have sent it
        self.repo.store.put_bytes(prompt)
        self.prompt = [hashlib.sha256(prompt).hexdigest(), len(prompt)]
        self.tokens = {
            "ada": create_token(self.repo.root, "ada", "admin"),
            "cody": create_token(self.repo.root, "cody", "writer", ("fuzz*",)),
        }
        self.server = start_registry(self.repo.root)
        self.http = {who: self.server.client(t) for who, t in self.tokens.items()}

    def close(self):
        for client in self.http.values():
            client.close()
        self.server.stop()
        self.repo.close()


def valid_payload(t: Target) -> dict:
    """A payload the registry accepts: new commits (a unique message each time)."""
    n = next(SERIAL)
    adapter = {**copy.deepcopy(t.wire), "line": f"fuzz-{n}", "parents": [], "message": f"{n}"}
    members = [["router", "router", t.chat, "chat"], ["expert", "chat", t.chat, "chat"]]
    members.append(["summary", "summary", t.chat, "chat"])
    pinned = {**copy.deepcopy(t.wire), "kind": "set", "line": f"fuzzset-{n}", "parents": []}
    pinned |= {"files": {"route.md": t.prompt}, "tensors": [], "members": members}
    pinned |= {"peft": None, "config": set_config(t, f"fuzzset-{n}")}
    at = utcnow().isoformat()
    contract = {"name": "prod", "version": 1, "source": PROD}
    ev = {"commit": None, "contract": contract, "metrics": {"acc": 0.9}, "source": "manual"}
    ev |= {"evaluator": None, "data_hash": None, "by": "ann", "at": at}
    return {"bases": [copy.deepcopy(t.base)], "commits": [adapter, pinned], "evaluations": [ev]}


def set_config(t: Target, line: str) -> dict:
    """What `mint set commit` writes for a set whose every member is t.chat (the receiver
    rebuilds it from the members: mint.sets.bound)."""
    router = {"adapter": t.chat, "labels": ["chat"], "prompt": "route.md", "default": "chat"}
    return {
        "name": line,
        "protocol": "mol/1",
        "base": "tiny-llama",
        "router": router,
        "experts": {"chat": t.chat},
        "summary": {"adapter": t.chat, "prompt": "route.md"},
    }


def mutate(payload: dict, path: tuple, value) -> None:
    """Put VALUE at PATH (a key of "*": the first one there); DELETE removes the key."""
    node = payload
    for step in path[:-1]:
        if isinstance(node, dict) and step == "*" and node:
            step = sorted(node)[0]
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return
    last = path[-1]
    if isinstance(node, dict) and last == "*":
        if not node:
            return
        last = sorted(node)[0]
    if isinstance(node, dict) or (isinstance(node, list) and isinstance(last, int)):
        if isinstance(node, list) and last >= len(node):
            return
        if value is DELETE:
            node.pop(last, None) if isinstance(node, dict) else node.pop(last)
        else:
            node[last] = value


def build(t: Target, changes) -> dict:
    payload = valid_payload(t)
    for path, value in changes:
        if path[:3] != (*EVAL, "commit"):
            mutate(payload, path, value)
    for wire in payload.get("commits", []) if isinstance(payload.get("commits"), list) else []:
        if isinstance(wire, dict) and not any(p[:3] == (*COMMIT, "id") for p, _ in changes):
            recompute_id_if_whole(wire)
    try:
        payload["evaluations"][0]["commit"] = payload["commits"][0]["id"]
    except (KeyError, IndexError, TypeError):
        pass
    for path, value in changes:
        if path[:3] == (*EVAL, "commit"):
            mutate(payload, path, value)
    return payload


def test_arbitrary_values_in_a_push_are_refused_cleanly_or_kept_sound(tmp_path, models):
    t = Target(tmp_path / "registry", models)
    try:
        ANSWERS.clear()
        push_examples(t)
        print(f"POST /objects answered {dict(sorted(ANSWERS.items()))}")  # shown with -s
        assert ANSWERS[200] and sum(n for code, n in ANSWERS.items() if code >= 400), ANSWERS
        code, out, err = run_in_process(["--repo", str(t.repo.root), "fsck"])  # the real CLI
        assert code == 0 and " 0 problems" in out, out + err
    finally:
        t.close()


@fuzz
@given(changes=mutations, who=st.sampled_from(["ada", "cody"]))
@example(changes=[], who="ada")  # the payload as made: accepted, and then checked
@example(changes=[((*EVAL, "contract", "version"), 2)], who="ada")  # an admin's new version
def push_examples(t: Target, changes, who):
    payload = build(t, changes)
    response = t.http[who].post(
        "/api/v1/objects",
        content=json.dumps(payload),  # NaN and Infinity as Python's json writes them
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code < 500, (response.status_code, response.text, changes)
    ANSWERS[response.status_code] += 1
    if not changes:  # the unchanged payload is good: the property is not empty
        assert response.status_code == 200, response.text
    if response.status_code >= 300:
        assert response.json()["error"]["message"]
        return
    report = api.fsck(t.repo)
    assert report.ok, (report.problems, changes)
    for cid in response.json()["stored"]:  # what went in reads back: no page answers 500
        for path, params in (
            (f"/api/v1/commits/{cid}", {}),
            ("/api/v1/evaluations", {"rev": cid}),
            ("/api/v1/gate", {"rev": cid, "channel": "production"}),
        ):
            got = t.http["ada"].get(path, params=params)
            assert got.status_code < 500, (path, got.text, changes)
