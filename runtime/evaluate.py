"""Route evaluation: how often the router picks the labelled expert, and where it goes wrong."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mint.errors import InvalidConfig
from mint.objects import Evaluation
from mint.runtime.engine import Engine


@dataclass(frozen=True)
class RouteEval:
    """Accuracy over `n` records; `confusion[expected][predicted]` counts every pair."""

    accuracy: float
    confusion: dict[str, dict[str, int]]
    n: int
    fallbacks: int = 0  # records routed to the default because routing could not run
    set_id: str | None = None
    evaluation: Evaluation | None = None  # where `mint route-eval --contract` recorded it


def read_records(path: str | Path) -> Iterator[dict]:
    """Labelled requests from a JSONL file: `{"messages": [...], "label": "coding"}` per line."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InvalidConfig(f"{path}:{number}: not JSON: {exc}") from None
            if (
                not isinstance(record, dict)
                or not isinstance(record.get("messages"), list)
                or "label" not in record
            ):
                raise InvalidConfig(f"{path}:{number}: expected an object with messages and label")
            yield record


def evaluate_routes(engine: Engine, records: Iterable[dict]) -> RouteEval:
    """Route every record's messages and compare with its label.

    Labels the set does not know still count: they can only be wrong, and show up as their
    own row of the confusion matrix.
    """
    labels = list(engine.spec.labels)
    confusion: dict[str, dict[str, int]] = {a: {b: 0 for b in labels} for a in labels}
    n = correct = fallbacks = 0
    for record in records:
        expected = str(record["label"])
        decision = engine.route(record["messages"])
        row = confusion.setdefault(expected, {b: 0 for b in labels})
        row[decision.label] += 1
        n += 1
        correct += decision.label == expected
        fallbacks += decision.fallback is not None
    return RouteEval(correct / n if n else 0.0, confusion, n, fallbacks, engine.id)
