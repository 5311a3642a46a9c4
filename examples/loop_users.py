"""The loop demo's world: phrasing families, the data sets drawn from them, and simulated users
who talk to a real `mint serve` and say what they thought of each answer.

Each label's topic words (`mint.examples.train.TOPICS`) are dealt into three disjoint phrasing
families, A, B and C. The seed router learns family A only; a LoRA on the tiny base learns a
code for each word it sees, so a router that never saw a family's words routes its requests
about as well as a coin with four sides. Users adopt the families over time (A and B at
first, then C as well), so each round's traces teach the next router what the last one
lacked, and the fixed held-out set (all three families, never trained on) shows it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mint.examples.train import LABELS, TOPICS, synthetic_requests, write_jsonl

FAMILIES = "ABC"


def family_topics(family: str) -> dict[str, list[str]]:
    """Each label's words of one phrasing family: every third topic word."""
    index = FAMILIES.index(family)
    return {label: words[index::3] for label, words in TOPICS.items()}


def requests_of(n: int, families: str, seed: int) -> list[dict]:
    """N labelled requests, the families taking turns (each family cycles through the labels);
    each record also names its `family`."""
    per = [
        synthetic_requests(-(-n // len(families)), seed=seed * 10 + i, topics=family_topics(f))
        for i, f in enumerate(families)
    ]
    out = []
    for i in range(n):
        family = i % len(families)
        out.append({**per[family][i // len(families)], "family": families[family]})
    return out


@dataclass(frozen=True)
class LoopData:
    """The files the loop trains, gates and measures on."""

    seed: Path  # what router v0 learns: family A only
    heldout: Path  # the fixed measure: families A, B and C, never trained on
    gate: Path  # what the contract evaluates candidates on (A, B and C; its own seed)


def write_data(out: Path, *, n_seed: int = 120, n_heldout: int = 200, n_gate: int = 100):
    """The seed, held-out and gate sets as JSONL under OUT."""
    out.mkdir(parents=True, exist_ok=True)
    return LoopData(
        seed=write_jsonl(requests_of(n_seed, "A", seed=1), out / "seed.jsonl"),
        heldout=write_jsonl(requests_of(n_heldout, FAMILIES, seed=2), out / "heldout.jsonl"),
        gate=write_jsonl(requests_of(n_gate, FAMILIES, seed=3), out / "gate.jsonl"),
    )


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass
class Tally:
    """What one phase of traffic saw: requests, routes right, feedback sent, by variant."""

    requests: int = 0
    right: int = 0
    scores: list[float] = field(default_factory=list)
    by_set: dict[str, int] = field(default_factory=dict)

    def add(self, set_id: str, right: bool, score: float) -> None:
        self.requests += 1
        self.right += right
        self.scores.append(score)
        self.by_set[set_id] = self.by_set.get(set_id, 0) + 1

    @property
    def mean_score(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0


class Users:
    """A crowd of simulated users of one server: each request comes from one of N_USERS (the
    `user` field keeps a user on one variant of a canary), and each answer gets feedback:
    the expert that should have answered and a score, 0.85-1.0 when it was routed right and
    0.0-0.2 when not. One user in ten gives a score without a label. Seeded: the same run
    sends the same requests and scores."""

    def __init__(self, client, *, n_users: int = 60, seed: int = 0, model: str = "macaron"):
        self.client, self.n_users, self.model = client, n_users, model
        self.rng = random.Random(seed)
        self.failures = 0

    def phase(self, n: int, families: str, seed: int, *, until=None, show: int = 0) -> Tally:
        """Send N requests drawn from FAMILIES (more, up to 4N, while `until()` is false,
        checked every 20 requests) and print the first SHOW turns; returns what they saw."""
        tally = Tally()
        pool = requests_of(4 * n, families, seed)
        for i, record in enumerate(pool):
            if i >= n and (until is None or (i % 20 == 0 and until())):
                break
            self.turn(record, tally, show=i < show)
        return tally

    def turn(self, record: dict, tally: Tally, *, show: bool = False) -> None:
        user = f"user-{self.rng.randrange(self.n_users)}"
        body = {"model": self.model, "messages": record["messages"], "max_tokens": 4}
        reply = self._post("/v1/chat/completions", body | {"user": user})
        route = reply["mint"]["route"]
        right = route == record["label"]
        score = self.rng.uniform(0.85, 1.0) if right else self.rng.uniform(0.0, 0.2)
        feedback = {"id": reply["id"], "score": round(score, 3)}
        if self.rng.random() >= 0.1:
            feedback["label"] = record["label"]
        self._post("/v1/feedback", feedback)
        tally.add(reply["mint"]["set"], right, score)
        if show:
            text = record["messages"][-1]["content"]
            print(
                f"  {user:>8} [{record['family']}] {text!r}: routed to {route}"
                f" -> feedback {json.dumps({k: v for k, v in feedback.items() if k != 'id'})}"
            )

    def _post(self, path: str, body: dict) -> dict:
        r = self.client.post(path, json=body)
        if r.status_code != 200:
            self.failures += 1
            raise SystemExit(f"demo-loop: POST {path} answered {r.status_code}: {r.text[:300]}")
        return r.json()


def trained_records(seed: Path, exported: Sequence[Path]) -> list[dict]:
    """The seed set plus every exported routing example (labels from feedback)."""
    records = read_jsonl(seed)
    for path in exported:
        records += [r for r in read_jsonl(path) if r.get("label") in LABELS]
    return records
