"""A model card's `model-index` results, recorded as evaluations of the commit that carries the
card, with their own source (`model-card`): the numbers a trainer wrote about its own
adapter. A contract counts them for its gate only when its `sources` name `model-card`.

The card is the commit's `README.md`; its YAML front matter is read (safe_load, and only when
the file names `model-index`), each result's metrics taken by their `type` (and by their
`name`, when it differs). Each contract whose scope covers the line and whose every metric the
card gives gets one evaluation, with exactly those metrics; the others get none.
"""

from __future__ import annotations

import re

from mint.gates.contracts import covers
from mint.gates.evaluations import finite_metric
from mint.ids import EvalSource
from mint.objects import CommitResult, Evaluation

CARD = "README.md"
MAX_CARD = 256 * 1024  # bytes of a card read for its front matter
_FRONT = re.compile(rb"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def card_metrics(data: bytes) -> dict[str, float]:
    """Metric -> value of the model-index results in the card DATA ({} without any)."""
    if b"model-index" not in data[:MAX_CARD]:
        return {}
    front = _FRONT.match(data[:MAX_CARD])
    if front is None:
        return {}
    import yaml  # huggingface_hub's own dependency, loaded for the cards that need it

    try:
        meta = yaml.safe_load(front.group(1).decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return {}  # a card the Hub would not parse either: no results in it
    found: dict[str, float] = {}
    for model in _list(meta.get("model-index") if isinstance(meta, dict) else None):
        for result in _list(model.get("results") if isinstance(model, dict) else None):
            for m in _list(result.get("metrics") if isinstance(result, dict) else None):
                if isinstance(m, dict) and finite_metric(m.get("value")) is not None:
                    for key in (m.get("type"), m.get("name")):
                        if isinstance(key, str) and key:
                            found.setdefault(key, finite_metric(m["value"]))
    return found


def _list(value) -> list:
    return value if isinstance(value, list) else []


def record_card(b, result: CommitResult, files: dict, by: str) -> list[Evaluation]:
    """The evaluations of RESULT's commit that its card gives (FILES: the commit's, path ->
    FileEntry), recorded by the backend B: a repository on this machine, where the card is
    read from the store, not the folder (a registry records its uploads' cards itself)."""
    card = files.get(CARD)
    if b.is_remote or card is None or card.size > MAX_CARD:
        return []
    with b.local_blobs({card.sha256: card.size}).open(card.sha256) as f:
        metrics = card_metrics(f.read(MAX_CARD))
    if not metrics:
        return []
    made = []
    for c in b.contract_ls():
        names = [m["name"] for m in c.metrics]
        if not names or not covers(c.lines, result.line) or not all(n in metrics for n in names):
            continue
        values = {n: metrics[n] for n in names}
        made.append(
            b.record_evaluation(
                result.id,
                c.name,
                values,
                source=EvalSource.MODEL_CARD,
                evaluator={"model-card": CARD},
                by=by,
            )
        )
    return made
