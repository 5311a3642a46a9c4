"""Signed moves (issue 23): a promote or rollback signed as an in-toto statement.

The statement names the move whole: its action, line and channel, the commit it moves from
and to, the contract version and evaluations the gate used, who acts, the history entry it
follows (the channel's state it was made against: a statement cannot be replayed after the
channel moved away and back) and when it was signed. It is sealed the way a commit's
signature is (`mint.signing.bundle.seal`: a Sigstore bundle holding a DSSE envelope over the
statement, one ECDSA signature by an elliptic-curve key, offline), checked inside the move's
transaction against the move about to be made (the same statement, a trusted key, a
signature that verifies) and kept beside the move's history entry (`move_signatures`). A
channel protected as signed (`mint.team.protection`) moves only so.

A signature can be made here, with the key (`SignHere`), or elsewhere, on the client of a
registry, given as its bundle (`Given`); `PLAN` asks for the statement of the move without
making it (the transaction is rolled back), which is what a client signs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass

import sqlalchemy as sa

from mint import schema as s
from mint.errors import MoveNotSigned, MoveStatementMismatch
from mint.ids import Action, RefKind, as_utc, iso, utcnow
from mint.objects import Move
from mint.signing.bundle import (
    MAX_BUNDLE,
    STATEMENT_TYPE,
    envelope,
    hash_for,
    load_private_key,
    pae,
    seal,
)
from mint.signing.keys import crypto
from mint.signing.trust import MOVES, keys_for
from mint.team.protection import needs_signature, signature_keys

PREDICATE_TYPE = "https://mint.dev/move/v1"
UNSIGNED = "it carries no signature"


@dataclass(frozen=True)
class MoveStatement:
    """What a signed move states (the predicate of its in-toto statement)."""

    action: str  # promote | force | rollback | canary-start | canary-stop
    line: str
    channel: str
    from_: str | None  # the holder it replaces (None: the channel is new)
    to: str | None
    contract: str | None  # the id of the contract version the gate applied
    evaluations: list[int]  # the evaluations the gate used
    actor: str  # who moves it (a registry's token name)
    after: int | None  # the channel's latest history entry before this move
    at: str | None = None  # when it was signed
    fraction: float | None = None  # a canary's: the share of requests its candidate serves


@dataclass(frozen=True)
class SignedMove:
    """A history entry and what its signature says (`mint history --verify`)."""

    move: Move
    state: str  # unsigned | valid | invalid
    key: str | None = None  # the trusted key's name, when valid
    fingerprint: str | None = None  # the key the bundle names
    why: str | None = None  # when invalid: the reason, in one line


# --- the statement ----------------------------------------------------------------------


CANARY_ACTIONS = (Action.CANARY_START, Action.CANARY_STOP)


def expected(conn, move: Move, fraction: float | None = None) -> MoveStatement:
    """The statement of MOVE (its history row written, in CONN's transaction). A canary's
    start or stop (which sends traffic too: issue 35) names its FRACTION (read from its
    canary when not given) and follows the latest entry of the channel or of its canaries,
    so that it cannot be replayed after a canary started or stopped; a move of the channel
    follows the latest move of the channel, as it always did."""
    h = s.ref_history.c
    canary = move.action in CANARY_ACTIONS
    kinds = [RefKind.CHANNEL, RefKind.CANARY] if canary else [RefKind.CHANNEL]
    q = (
        sa.select(h.id)
        .where(h.line == move.line, h.name == move.channel, h.kind.in_(kinds))
        .where(h.id < move.id)
        .order_by(h.id.desc())
        .limit(1)
    )
    after = conn.execute(q).scalar()
    if canary and fraction is None:
        fraction = _canary_fraction(conn, move)
    return MoveStatement(
        str(move.action),
        move.line,
        move.channel,
        move.from_,
        move.to,
        move.contract,
        sorted(move.evaluations),
        move.by,
        after,
        fraction=fraction,
    )


def _canary_fraction(conn, move: Move) -> float | None:
    """The fraction of the canary whose start or stop MOVE is (its candidate beside its
    baseline, the latest started by then)."""
    c = s.canaries.c
    q = (
        sa.select(c.fraction)
        .where(c.line == move.line, c.channel == move.channel, c.candidate == move.to)
        .where(
            c.baseline == move.from_, c.started_at <= as_utc(dt.datetime.fromisoformat(move.at))
        )
        .order_by(c.id.desc())
        .limit(1)
    )
    return conn.execute(q).scalar()


def payload(st: MoveStatement) -> bytes:
    """The in-toto statement of ST: its subject LINE@CHANNEL with the commit it moves to (a
    canary's: its candidate). A statement without a fraction (a promote's, a rollback's) has
    none in its predicate, as before canaries were signed."""
    predicate = {k.rstrip("_"): v for k, v in dataclasses.asdict(st).items()}
    if predicate["fraction"] is None:
        del predicate["fraction"]
    body = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f"{st.line}@{st.channel}", "digest": {"sha256": st.to or ""}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }
    return json.dumps(body, indent=2, ensure_ascii=True).encode("utf-8")


def sign_statement(st: MoveStatement, key) -> bytes:
    """ST, stamped with the time now, sealed with KEY."""
    return seal(payload(dataclasses.replace(st, at=iso(utcnow()))), key)


def read(bundle: bytes) -> tuple[MoveStatement, bytes, bytes, str | None]:
    """(statement, payload, signature, key hint) of BUNDLE; ValueError, in words, if it is
    not a signed move statement (its signature is not checked here)."""
    if len(bundle) > MAX_BUNDLE:
        raise ValueError(f"it is larger than {MAX_BUNDLE} bytes")
    (data, signature), hint = envelope(bundle)
    try:
        st = json.loads(data)
        if st["_type"] != STATEMENT_TYPE or st["predicateType"] != PREDICATE_TYPE:
            raise ValueError("it is not a signed move statement")
        p = st["predicate"]
        fields = [f.name for f in dataclasses.fields(MoveStatement) if f.name != "fraction"]
        found = MoveStatement(**{f: p[f.rstrip("_")] for f in fields}, fraction=p.get("fraction"))
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError("it is not a signed move statement") from exc
    except json.JSONDecodeError:
        raise ValueError("its payload is not JSON") from None
    return found, data, signature, hint if isinstance(hint, str) else None


def _differences(found: MoveStatement, want: MoveStatement) -> str | None:
    """The first field where the statement FOUND names another move than WANT, in words."""
    names = {
        "line": "line",
        "channel": "channel",
        "action": "action",
        "from_": "from commit",
        "to": "to commit",
        "contract": "contract",
        "evaluations": "evaluations",
        "actor": "actor",
        "after": "history entry",
        "fraction": "fraction",
    }
    for attr, word in names.items():
        got, wanted = getattr(found, attr), getattr(want, attr)
        if attr == "evaluations" and isinstance(got, list):
            got = sorted(got, key=str)
        if got != wanted:
            return f"it names {word} {_shown(got)}, not {_shown(wanted)}"
    return None


def _shown(value) -> str:
    if isinstance(value, str) and len(value) == 64:
        return value[:12]
    return "none" if value is None else str(value)[:100]


def check(bundle: bytes, want: MoveStatement, keys: dict) -> tuple[str, str]:
    """(key name, fingerprint) of the trusted key (KEYS: fingerprint -> (name, PEM)) whose
    signature BUNDLE carries over the statement WANT. MoveNotSigned if it is not a
    signature that verifies here, MoveStatementMismatch if it signs another move."""
    ref = f"{want.line}@{want.channel}"
    try:
        found, data, signature, hint = read(bundle)
    except ValueError as exc:
        raise MoveNotSigned(ref, f"its signature is unreadable: {exc}") from None
    excluded = getattr(keys, "excluded", {})
    if hint in excluded and hint not in keys:
        raise MoveNotSigned(ref, f"it is signed by {excluded[hint]}")
    if hint not in keys:
        who = f"key {hint[:16]}" if hint else "a key it does not name"
        raise MoveNotSigned(ref, f"it is signed by {who}, which is not trusted here")
    name, pem = keys[hint]
    if not _verifies(data, signature, pem):
        raise MoveNotSigned(ref, "its signature does not verify with the key it names")
    wrong = _differences(found, want)
    if wrong:
        raise MoveStatementMismatch(ref, f"the signed statement is for another move: {wrong}")
    return name, hint


def move_keys(conn, line: str, channel: str):
    """The trusted keys whose signature a move of LINE@CHANNEL takes: those that may sign
    moves there (`mint.signing.trust`), and among them only the keys the channel's protection
    names, if it names any."""
    return keys_for(conn, MOVES, line=line, channel=channel, names=signature_keys(conn, channel))


def _verifies(data: bytes, signature: bytes, pem: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature

    serialization, ec = crypto()
    key = serialization.load_pem_public_key(pem)
    try:
        key.verify(signature, pae(data), ec.ECDSA(hash_for(key)))
    except InvalidSignature:
        return False
    return True


# --- in the move's transaction -------------------------------------------------------------


class Planned(Exception):  # noqa: N818 - not an error: the answer to PLAN
    """Raised with the statement of the move PLAN asked for (the transaction rolls back)."""

    def __init__(self, statement: MoveStatement):
        super().__init__("planned")
        self.statement = statement


class SignHere:
    """Sign with the private key in a file here (loaded now: a wrong key or password fails
    before anything moves)."""

    def __init__(self, private_key: str | os.PathLike, password: str | None):
        self.key = load_private_key(private_key, password)

    def bundle(self, want: MoveStatement) -> bytes:
        return sign_statement(want, self.key)


@dataclass(frozen=True)
class Given:
    """A bundle made elsewhere (on a registry's client), checked against the move."""

    data: bytes

    def bundle(self, want: MoveStatement) -> bytes:
        return self.data


PLAN = object()  # the statement of the move, and nothing moves (never from the wire)


def signing_of(sign=None, password: str | None = None, signature=None):
    """How a move is signed: with the key in file SIGN, with SIGNATURE (a bundle's text, or
    PLAN), or not (None)."""
    if signature is PLAN:
        return PLAN
    if sign is not None:
        return SignHere(sign, password)
    if signature is not None:
        return Given(signature.encode("utf-8", "surrogatepass"))
    return None


def settle(
    conn, move: Move, signing, *, signed: bool | None = None, fraction: float | None = None
) -> None:
    """In MOVE's transaction, its history row written: refuse an unsigned move of a channel
    that needs a signature (SIGNED: whether it does, if the caller read it in this
    transaction); check a signature against the move (a canary's: with its FRACTION), and
    keep it beside it."""
    if signing is None:
        if needs_signature(conn, move.channel) if signed is None else signed:
            ref = f"{move.line}@{move.channel}"
            raise MoveNotSigned(ref, f"{move.channel} moves only when signed; {UNSIGNED}")
        return
    want = expected(conn, move, fraction)
    if signing is PLAN:
        raise Planned(want)
    bundle = signing.bundle(want)
    _, hint = check(bundle, want, move_keys(conn, move.line, move.channel))
    conn.execute(
        s.move_signatures.insert().values(
            entry=move.id,
            sha256=hashlib.sha256(bundle).hexdigest(),
            bundle=bundle.decode("utf-8"),
            key_hint=hint,
            added_at=utcnow(),
        )
    )


# --- history --verify ------------------------------------------------------------------


def _reason(why: str) -> str:
    return why.removeprefix("the signed statement is for another move: ")


def verify_moves(conn, moves: list[Move]) -> list[SignedMove]:
    """Each of MOVES with what its signature says against the keys trusted now."""
    m = s.move_signatures.c
    ids = [mv.id for mv in moves]
    rows = {r.entry: r for r in conn.execute(sa.select(s.move_signatures).where(m.entry.in_(ids)))}
    out = []
    for mv in moves:
        row = rows.get(mv.id)
        if row is None:
            out.append(SignedMove(mv, "unsigned"))
            continue
        keys = move_keys(conn, mv.line, mv.channel)
        try:
            name, fp = check(row.bundle.encode("utf-8"), expected(conn, mv), keys)
        except MoveNotSigned as exc:
            out.append(SignedMove(mv, "invalid", None, row.key_hint, _reason(exc.why)))
            continue
        out.append(SignedMove(mv, "valid", name, fp))
    return out
