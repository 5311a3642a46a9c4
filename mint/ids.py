"""Ids, the canonical JSON they hash, times, and the closed vocabularies mint records.

An object's id is the sha256 hex of its canonical JSON: sorted keys, no whitespace, UTF-8.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from enum import StrEnum
from typing import Any, NewType

from mint.store import BlobId

CommitId = NewType("CommitId", str)
ContractId = NewType("ContractId", str)

__all__ = [
    "Action",
    "BlobId",
    "CanaryOutcome",
    "CommitId",
    "ContractId",
    "EvalSource",
    "Kind",
    "RefKind",
    "Role",
    "as_utc",
    "canonical_json",
    "is_pickle",
    "iso",
    "object_id",
    "utcnow",
]


class Kind(StrEnum):
    """What a line holds."""

    ADAPTER = "adapter"
    SET = "set"


class RefKind(StrEnum):
    TAG = "tag"
    CHANNEL = "channel"
    HEAD = "head"  # a line head, in ref_history only: pushed or forced moves
    CANARY = "canary"  # a channel's canary, in ref_history only: started and stopped
    FLEET = "fleet"  # a channel's fleet, in ref_history only: diverged from its holder, or not


class Action(StrEnum):
    """How a ref moved, as its history records it."""

    CREATE = "create"
    FORCE = "force"
    PROMOTE = "promote"
    ROLLBACK = "rollback"
    DELETE = "delete"
    PUSH = "push"
    MERGE = "merge"  # a line's head moved to a proposal's commit (issue 37)
    CANARY_START = "canary-start"
    CANARY_STOP = "canary-stop"
    FLEET_DIVERGED = "fleet-diverged"
    FLEET_CONVERGED = "fleet-converged"


class CanaryOutcome(StrEnum):
    """How a canary ended."""

    PROMOTED = "promoted"  # its candidate went on to hold the channel
    STOPPED = "stopped"  # it was called off


class Role(StrEnum):
    """A set member's role."""

    ROUTER = "router"
    EXPERT = "expert"
    SUMMARY = "summary"


class EvalSource(StrEnum):
    """Where an evaluation's numbers came from."""

    EVALUATOR = "evaluator"  # the contract's evaluator, run by mint
    MANUAL = "manual"  # --metric values computed elsewhere
    ROUTE_EVAL = "route-eval"  # the runtime's routing accuracy
    MODEL_CARD = "model-card"  # a pushed model card's model-index results (the trainer's claim)
    LM_EVAL = "lm-eval"  # lm-evaluation-harness's results file (mint.gates.harness)
    INSPECT = "inspect"  # inspect_ai's log


# The sources whose evaluations hold every metric the harness wrote, not only the contract's.
HARNESS_SOURCES = frozenset({EvalSource.LM_EVAL, EvalSource.INSPECT})


# Files named as pickles. mint never loads one: pickled weights are refused at the door
# (mint.commits.adapter), any other (the Trainer's training_args.bin) kept as inert bytes.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def is_pickle(path: str) -> bool:
    """Whether PATH is named as a pickle: kept as bytes, never loaded by mint."""
    return path.lower().endswith(PICKLE_SUFFIXES)


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no whitespace, UTF-8: the bytes an object's id is the sha256 of."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def object_id(obj: Any) -> str:
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def as_utc(value: dt.datetime) -> dt.datetime:
    """SQLite hands datetimes back without a zone; they were written as UTC."""
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def iso(value: dt.datetime | None) -> str | None:
    return as_utc(value).isoformat() if value else None


def vllm_name(line: str, commit: str) -> str:
    """The name an adapter version is served by on vLLM: LINE@<full commit id>, named by its
    content (mint's plugin resolves it; `mint serve --engine vllm` asks for it)."""
    return f"{line}@{commit}"


def is_url(value: object) -> bool:
    """Whether VALUE names a registry (http:// or https://) rather than a folder: the one
    place that tells them apart."""
    return isinstance(value, str) and value.startswith(("http://", "https://"))
