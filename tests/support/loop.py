"""Builders shared by the loop's tests (canaries, candidates, improve): a set line `macaron`
on the tiny base, its member lines, and live traces with feedback written into the tables
as a server records them."""

from __future__ import annotations

import itertools
import uuid

from mint import api
from mint import schema as s
from mint.ids import utcnow

MOL = """
name = "macaron"
protocol = "mol/1"
base = "tiny-llama"
[router]
adapter = "router"
labels = ["chat", "coding"]
prompt = "route.md"
default = "chat"
[experts]
chat = "chat"
coding = "coding"
[summary]
adapter = "summary"
prompt = "summary.md"
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
    (folder / "mol.toml").write_text(MOL)
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
