"""Builders shared by the loop's tests (canaries, candidates, improve): a set line `macaron`
on the tiny base, its member lines, a contract whose evaluator scores routers from a table,
and live traces with feedback written into the tables as a server records them. The fixtures
`two_sets` and `loop` in conftest.py are built here."""

from __future__ import annotations

import itertools
import json
import sys
import uuid
from collections.abc import Callable

from mint import api
from mint import schema as s
from mint.ids import utcnow

from support.texts import MACARON

# An evaluator process: it reads a checkout's mol.toml and scores its router commit from a
# table the test writes (a stand-in for a benchmark, so that "better" and "worse" are known).
EVALUATOR = """
import json, sys, tomllib
mol = tomllib.load(open(sys.argv[1] + "/mol.toml", "rb"))
table = json.load(open(sys.argv[2]))
print(json.dumps({"score": table.get(mol["router"]["adapter"], 0.6)}))
"""

_n = itertools.count()


def build_set(repo, models, tmp_path) -> dict:
    """Lines router, chat, coding, summary (one commit each) and the set macaron pinning
    them; returns {line: commit id, "set": set commit id}."""
    api.base_add(repo, "tiny-llama", models["base"])
    ids = {}
    for line, key in (("router", "a1"), ("chat", "a2"), ("coding", "a3"), ("summary", "a2")):
        ids[line] = api.commit(repo, line, models[key], line, author="alice").id
    folder = tmp_path / "macaron"
    folder.mkdir()
    (folder / "mol.toml").write_text(MACARON)
    (folder / "route.md").write_text("Route the request to one expert.\n")
    (folder / "summary.md").write_text("Summarise the turn.\n")
    ids["set"] = api.set_commit(repo, folder / "mol.toml", "first", author="alice").id
    ids["folder"] = folder
    return ids


def add_traces(repo, commit: str, variant: str, scores: list[float | None], *, line="macaron"):
    """One trace per score served by COMMIT as VARIANT, with feedback SCORE (None: none)."""
    with repo.db.write() as conn:
        for score in scores:
            tid = f"chatcmpl-{next(_n)}-{uuid.uuid4().hex[:8]}"
            row = dict(id=tid, at=utcnow(), set_line=line, set_commit=commit, variant=variant)
            row |= dict(label="chat", latency={"total": 0.01})
            conn.execute(s.traces.insert().values(**row))
            if score is not None:
                fb = dict(trace_id=tid, score=score, at=utcnow(), by="user")
                conn.execute(s.feedback.insert().values(**fb))


def two_sets(repo, models, tmp_path) -> dict:
    """macaron@production holds set v1; v2 (a newer chat expert) is committed beside it.
    Returns build_set's ids plus "chat2" and "set2"."""
    ids = build_set(repo, models, tmp_path)
    api.promote(repo, ids["set"], "production", by="alice")
    ids["chat2"] = api.commit(repo, "chat", models["a1"], "chat v2", author="alice").id
    ids["set2"] = api.set_commit(repo, ids["folder"] / "mol.toml", "v2", author="alice").id
    return ids


def quality_loop(repo, models, tmp_path) -> tuple[dict, Callable[[str, float], None]]:
    """macaron's v1 holds staging and production; contract `quality` guards staging with the
    EVALUATOR and a [live] table. Returns (ids, score_router: router commit, score -> None)."""
    ids = build_set(repo, models, tmp_path)
    script, table = tmp_path / "evaluate.py", tmp_path / "scores.json"
    script.write_text(EVALUATOR)
    table.write_text("{}")
    contract = tmp_path / "quality.toml"
    command = json.dumps([sys.executable, str(script), "{checkout}", str(table)])
    contract.write_text(
        'name = "quality"\nchannel = "staging"\n'
        '[[metric]]\nname = "score"\nmin = 0.5\nmax_regression = 0.05\n'
        f"[evaluator]\ncommand = {command}\n"
        "[live]\nmin_score = 0.5\nmax_drop = 0.05\nmin_traces = 5\n"
    )
    api.contract_add(repo, contract, by="alice")
    api.evaluate(repo, ids["set"], "quality", by="alice")
    api.promote(repo, ids["set"], "staging", by="alice")
    api.promote(repo, ids["set"], "production", by="alice")

    def score_router(commit: str, score: float) -> None:
        scores = json.loads(table.read_text())
        table.write_text(json.dumps(scores | {commit: score}))

    return ids, score_router


# --- the loop against a real server (tests/test_loop_faults.py) ----------------------------

# The loop demo's contract: candidates gated on staging by the table-driven EVALUATOR, and a
# [live] table that sets only the keys the demo always had, so the rest are the defaults.
LIVE_CONTRACT = """name = "quality"
channel = "staging"
[[metric]]
name = "score"
min = 0.5
max_regression = 0.05
[evaluator]
command = {command}
[live]
min_score = 0.3
max_drop = 0.05
min_traces = 20
"""


def router_variant(source, folder, note: str):
    """A copy of the adapter folder SOURCE with a note in it: another commit of the same
    weights (a commit's id covers every file), which a test scores as it likes."""
    import shutil
    from pathlib import Path

    folder = Path(folder)
    shutil.copytree(source, folder)
    (folder / "NOTE.md").write_text(note + "\n")
    return folder


class Crowd:
    """Users of a real `mint serve`: each request carries a `user` and its caller's token (a
    token is a caller of its own), and each answer gets feedback scored by SCORE(set that
    answered) (None: no feedback). PEOPLE are (user, token) pairs, taking turns in order, so
    that N turns reach every one of them when N >= len(PEOPLE)."""

    def __init__(self, url: str, people: list[tuple[str, str | None]]):
        self.url, self.people = url, people

    def turns(self, n: int, score: Callable[[str], float | None], *, threads: int = 8):
        """N turns; returns [(user, set that answered, trace id)] in the order sent."""
        from concurrent.futures import ThreadPoolExecutor

        picks = [self.people[i % len(self.people)] for i in range(n)]
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(lambda who: self._turn(*who, score), picks))

    def _turn(self, user: str, token: str | None, score) -> tuple[str, str, str]:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        body = {
            "model": "macaron",
            "messages": [{"role": "user", "content": f"please fix the python bug of {user}"}],
            "max_tokens": 1,
            "user": user,
        }
        with httpx.Client(base_url=self.url, headers=headers, timeout=120) as client:
            r = client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            answer = r.json()
            value = score(answer["mint"]["set"])
            if value is not None:
                fed = client.post("/v1/feedback", json={"id": answer["id"], "score": value})
                assert fed.status_code == 200, fed.text
        return user, answer["mint"]["set"], answer["id"]
