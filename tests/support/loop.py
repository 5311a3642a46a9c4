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
