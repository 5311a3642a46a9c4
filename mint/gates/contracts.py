"""Evaluation contracts: TOML files, checked strictly and versioned by content."""

from __future__ import annotations

import math
import os
import tomllib
from pathlib import Path

import sqlalchemy as sa

from mint import schema as s
from mint.db import insert_new
from mint.errors import (
    ContractAmbiguous,
    ContractConflict,
    Forbidden,
    InvalidConfig,
    InvalidObject,
    MintError,
    RefConflict,
    RevisionNotFound,
)
from mint.exchange import received
from mint.ids import ContractId, EvalSource, iso, object_id, utcnow
from mint.objects import Contract, ContractAdded
from mint.refs import check_name
from mint.refs.revisions import MAX_NAME, SUGGESTIONS, nearest
from mint.repo import Repo
from mint.signing.policy import parse_keys
from mint.team.tokens import check_globs, matches

TOP_KEYS = {"name", "channel", "requires", "approvals", "metric", "evaluator", "lines", "live"}
TOP_KEYS.add("signature")  # [signature]: issue 23
TOP_KEYS.add("served")  # [[served]]: issue 38
TOP_KEYS.add("sources")  # the evaluation sources its gate counts: issue 37
# A gate counts every source but the model card's results (the trainer's own claim), unless
# the contract names the sources it counts.
DEFAULT_SOURCES = tuple(str(x) for x in EvalSource if x != EvalSource.MODEL_CARD)
METRIC_KEYS = {"name", "min", "max", "max_regression"}
EVALUATOR_KEYS = {"command", "timeout", "version", "data"}
HARNESS_KEYS = {"harness", "tasks", "include", "limit", "num_fewshot"}  # docs/harness.md
HARNESSES = ("lm-eval", "inspect")
LIVE_KEYS = {"min_score", "max_drop", "min_traces", "max_traces", "min_users", "min_callers"}
LIVE_KEYS |= {"max_user_share", "max_caller_share", "confidence"}  # issue 40: who steers
SIGNATURE_KEYS = {"required", "keys"}
SERVED_KEYS = {"channel", "min_minutes", "min_instances"}
MAX_MINUTES = 366 * 24 * 60.0  # a year of soak time
DEFAULT_TIMEOUT = 600.0
MAX_TIMEOUT = 7 * 24 * 3600.0
MAX_VERSION = 2**31 - 1  # the version column is a 32-bit integer
MAX_SOURCE = 1024 * 1024  # characters of TOML, as the registry's contract route takes


def is_finite_number(value: object) -> bool:
    """An int or float (not a bool) that is neither NaN nor infinite, and fits a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


# --- parsing -----------------------------------------------------------------


def parse_contract(text: str, source: str = "contract") -> dict:
    """Parse and check a contract's TOML; return its canonical body."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidConfig(f"{source} is not valid TOML: {exc}") from None
    bad = lambda why: InvalidConfig(f"{source}: {why}")  # noqa: E731
    unknown = set(raw) - TOP_KEYS
    if unknown:
        raise bad(f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(TOP_KEYS))})")
    for key in ("name", "channel"):
        if not isinstance(raw.get(key), str):
            raise bad(f"{key!r} must be a string")
        check_name("contract" if key == "name" else "channel", raw[key])
    requires = raw.get("requires", [])
    if not (isinstance(requires, list) and all(isinstance(r, str) for r in requires)):
        raise bad("'requires' must be a list of channel names")
    for ch in requires:
        check_name("channel", ch)
    approvals = raw.get("approvals", 0)
    if not isinstance(approvals, int) or isinstance(approvals, bool) or approvals < 0:
        raise bad("'approvals' must be a whole number, 0 or more")
    lines = _lines(raw.get("lines"), bad)
    body = {
        "name": raw["name"],
        "channel": raw["channel"],
        "requires": requires,
        "approvals": approvals,
        "metrics": [
            _metric(m, bad) for m in _list_of_tables(raw.get("metric", []), "metric", bad)
        ],
        "evaluator": _evaluator(raw.get("evaluator"), bad),
        "lines": lines,
    }
    # Sections added later: absent, the body (and so the contract's id) is what it was before.
    sections = {
        "live": _live,
        "signature": _signature,
        "served": lambda v, b: [_served(t, b) for t in _list_of_tables(v, "served", b)],
        "sources": _sources,
    }
    body |= {key: parse(raw[key], bad) for key, parse in sections.items() if key in raw}
    return body


def _lines(lines, bad) -> list[str] | None:
    """`lines`: the lines (names or globs) a team's contract covers; absent, every line."""
    if lines is not None and not (
        isinstance(lines, list) and all(isinstance(l, str) for l in lines)
    ):
        raise bad("'lines' must be a list of line names or globs (\"team-a/*\")")
    try:
        check_globs(lines)
    except MintError as exc:
        raise bad(f"lines: {exc}") from None
    return lines


def _sources(value, bad) -> list[str]:
    """`sources`: the evaluation sources whose results the gate counts (default: all but
    model-card, the model card's results as the trainer wrote them)."""
    known = [str(x) for x in EvalSource]
    if not (isinstance(value, list) and value and all(isinstance(v, str) for v in value)):
        raise bad(f"'sources' must be a list of evaluation sources ({', '.join(known)})")
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise bad(
            f"unknown evaluation source {unknown[0]!r} in sources (known: {', '.join(known)})"
        )
    return sorted(set(value))


def counted_sources(body: dict) -> tuple[str, ...]:
    """The evaluation sources a contract's gate counts."""
    return tuple(body.get("sources") or DEFAULT_SOURCES)


def scope_of(lines: list[str] | None) -> str:
    """A contract's scope: the sha256 of its sorted line globs; '' for every line."""
    return object_id(sorted(set(lines))) if lines else ""


def covers(lines: list[str] | None, line: str) -> bool:
    """Whether a contract limited to LINES (None or empty: every line) applies to LINE."""
    return not lines or matches(line, lines)


def _list_of_tables(value, key, bad) -> list[dict]:
    if not (isinstance(value, list) and all(isinstance(v, dict) for v in value)):
        raise bad(f"'{key}' must be an array of tables ([[{key}]])")
    return value


def _metric(m: dict, bad) -> dict:
    unknown = set(m) - METRIC_KEYS
    if unknown:
        raise bad(
            f"unknown metric key {sorted(unknown)[0]!r} (known: {', '.join(sorted(METRIC_KEYS))})"
        )
    if not isinstance(m.get("name"), str) or not m["name"]:
        raise bad("every [[metric]] needs a name")
    bounds = {k: m[k] for k in ("min", "max", "max_regression") if k in m}
    if not bounds:
        raise bad(f"metric {m['name']!r} sets none of min, max, max_regression")
    for k, v in bounds.items():
        if not is_finite_number(v):
            raise bad(f"metric {m['name']!r}: {k} must be a finite number")
    return {"name": m["name"], **{k: float(v) for k, v in bounds.items()}}


def _evaluator(ev, bad) -> dict | None:
    if ev is None:
        return None
    if not isinstance(ev, dict):
        raise bad("[evaluator] must be a table")
    unknown = set(ev) - EVALUATOR_KEYS - HARNESS_KEYS
    if unknown:
        raise bad(f"unknown evaluator key {sorted(unknown)[0]!r}")
    timeout = ev.get("timeout", DEFAULT_TIMEOUT)
    if not is_finite_number(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        raise bad(
            f"evaluator.timeout must be a number of seconds above 0, at most {MAX_TIMEOUT:g}"
        )
    if "harness" in ev:
        out = _harness(ev, bad)
    else:
        cmd = ev.get("command")
        if not (isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd)):
            raise bad("evaluator.command must be a non-empty list of strings")
        given = sorted(set(ev) & (HARNESS_KEYS - {"harness"}))
        if given:
            raise bad(f"evaluator.{given[0]} is for a harness, and this evaluator names none")
        out = {"command": cmd}
    out["timeout"] = float(timeout)
    for key in ("version", "data"):
        if key in ev:
            out[key] = str(ev[key])
    return out


def _harness(ev: dict, bad) -> dict:
    """[evaluator] naming a harness that mint runs itself, unmodified (docs/harness.md)."""
    if "command" in ev:
        raise bad("[evaluator] names a command and a harness: one of them")
    harness, tasks = ev["harness"], ev.get("tasks")
    if harness not in HARNESSES:
        raise bad(f"evaluator.harness must be one of {', '.join(HARNESSES)}")
    if not (isinstance(tasks, list) and tasks and all(isinstance(x, str) and x for x in tasks)):
        raise bad("evaluator.tasks must be a non-empty list of task names")
    out = {"harness": harness, "tasks": tasks}
    if "include" in ev:
        if not isinstance(ev["include"], str) or not ev["include"]:
            raise bad("evaluator.include must be the folder of the task files")
        out["include"] = ev["include"]
    if "limit" in ev:
        limit = ev["limit"]
        if not is_finite_number(limit) or limit <= 0:
            raise bad("evaluator.limit must be a number above 0 (samples, or a fraction)")
        out["limit"] = limit
    if "num_fewshot" in ev:
        shots = ev["num_fewshot"]
        if harness != "lm-eval":
            raise bad("evaluator.num_fewshot is lm-eval's; inspect's tasks set their own")
        if not isinstance(shots, int) or isinstance(shots, bool) or shots < 0:
            raise bad("evaluator.num_fewshot must be a whole number, 0 or more")
        out["num_fewshot"] = shots
    return out


def _live(live, bad) -> dict:
    """[live]: what production's live feedback must show (`mint.gates.live`). min_score is
    production's floor, max_drop how far a canary's mean may fall below production's,
    min_traces the scored traces each variant needs before either is judged and max_traces
    when an undecided canary stops; min_users and min_callers the distinct users and callers
    behind them, max_user_share and max_caller_share the most weight one may hold, confidence
    the level of the intervals the decisions rest on."""
    if not isinstance(live, dict):
        raise bad("[live] must be a table")
    unknown = set(live) - LIVE_KEYS
    if unknown:
        raise bad(
            f"unknown live key {sorted(unknown)[0]!r} (known: {', '.join(sorted(LIVE_KEYS))})"
        )
    out: dict = {}
    for key in ("min_score", "max_drop"):
        if key in live:
            v = live[key]
            if not is_finite_number(v) or not 0 <= v <= 1:
                raise bad(f"live.{key} must be a number from 0 to 1 (scores lie in [0, 1])")
            out[key] = float(v)
    for key in ("max_user_share", "max_caller_share"):
        if key in live:
            v = live[key]
            if not is_finite_number(v) or not 0 < v <= 1:
                raise bad(f"live.{key} must be a share above 0 and at most 1")
            out[key] = float(v)
    if "confidence" in live:
        v = live["confidence"]
        if not is_finite_number(v) or not 0.5 <= v < 1:
            raise bad("live.confidence must be a level from 0.5 up to (not including) 1")
        out["confidence"] = float(v)
    for key in ("min_traces", "max_traces", "min_users", "min_callers"):
        if key in live:
            n = live[key]
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 10**9:
                raise bad(f"live.{key} must be a whole number, 1 or more")
            out[key] = n
    if out.get("max_traces", 10**9) < out.get("min_traces", 1):
        raise bad("live.max_traces must be at least live.min_traces")
    return out


def _signature(table, bad) -> dict:
    """[signature]: `required = true` makes the gate refuse a commit that no trusted key
    signed; `keys` (names of trusted keys) narrows it to those keys (empty: any)."""
    if not isinstance(table, dict):
        raise bad("[signature] must be a table")
    unknown = set(table) - SIGNATURE_KEYS
    if unknown:
        known = ", ".join(sorted(SIGNATURE_KEYS))
        raise bad(f"unknown signature key {sorted(unknown)[0]!r} (known: {known})")
    required = table.get("required", False)
    if not isinstance(required, bool):
        raise bad("signature.required must be true or false")
    keys = table.get("keys", [])
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise bad("signature.keys must be a list of trusted keys' names")
    if keys and not required:
        raise bad("signature.keys names keys, but signature.required is not true")
    try:
        names = parse_keys(keys, "signature.keys")
    except MintError as exc:
        raise bad(f"signature.keys: {exc}") from None
    return {"required": required, "keys": list(names)}


def _served(table: dict, bad) -> dict:
    """[[served]]: the commit must have served CHANNEL (as its holder, by the served history
    that serving processes report) for MIN_MINUTES, on MIN_INSTANCES instances at once."""
    unknown = set(table) - SERVED_KEYS
    if unknown:
        known = ", ".join(sorted(SERVED_KEYS))
        raise bad(f"unknown served key {sorted(unknown)[0]!r} (known: {known})")
    if not isinstance(table.get("channel"), str):
        raise bad("every [[served]] needs a channel")
    check_name("channel", table["channel"])
    minutes = table.get("min_minutes", 0)
    if not is_finite_number(minutes) or not 0 <= minutes <= MAX_MINUTES:
        raise bad(f"served.min_minutes must be a number of minutes from 0 to {MAX_MINUTES:g}")
    n = table.get("min_instances", 1)
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 100_000:
        raise bad("served.min_instances must be a whole number, 1 or more")
    return {"channel": table["channel"], "min_minutes": float(minutes), "min_instances": n}


# --- storing and reading -----------------------------------------------------


def contract_add(repo: Repo, path: str | os.PathLike, *, by: str) -> ContractAdded:
    """Add the contract at PATH, or a new version of it when its content changed. A contract
    is its name within its scope (its `lines`): versions are numbered per (name, scope)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfig(f"cannot read {path}: {exc}") from None
    body = parse_contract(text, str(path))
    scope = scope_of(body["lines"])
    with repo.db.write() as conn:
        latest = _latest_row(conn, body["name"], scope)
        if latest is not None and latest.body == body:
            return ContractAdded(_contract(latest), created=False)
        version = 1 if latest is None else latest.version + 1
        cid = contract_id(version, body)
        if not insert_new(conn, s.contracts, _new_row(cid, version, body, text, by)):
            # Another writer added a version at the same moment: the same content is a no-op.
            latest = _latest_row(conn, body["name"], scope)
            if latest is not None and latest.body == body:
                return ContractAdded(_contract(latest), created=False)
            raise RefConflict(f"contract {body['name']}", None, latest.id if latest else None)
        return ContractAdded(_contract(contract_row(conn, cid)), created=True)


def contract_id(version: int, body: dict) -> str:
    """A contract version's id: the hash of its number and canonical body."""
    return object_id({"version": version, "body": body})


def _new_row(cid: str, version: int, body: dict, text: str, by: str) -> dict:
    return dict(
        id=cid,
        name=body["name"],
        version=version,
        channel=body["channel"],
        body=body,
        lines=body["lines"],
        scope=scope_of(body["lines"]),
        source=text,
        created_at=utcnow(),
        created_by=by,
    )


def check_version(value: object) -> int:
    """A contract version as it arrives from elsewhere: a JSON integer from 1 to MAX_VERSION.
    Not 2.0, "2", true or 1e400: a check that let those through once let a writer add a
    version of a gate's contract."""
    return received.whole(value, "a contract version", low=1, high=MAX_VERSION)


def receive_contract(conn, wire: object, *, by: str, may_add: bool) -> str:
    """The id of the contract version WIRE ({name, version, source}) names, recorded here
    when it is new, which needs MAY_ADD (on a registry: an admin's token). The same name,
    scope and version with other content is a ContractConflict: a recorded version never
    changes. A contract of the same name for other lines is another contract."""
    if not isinstance(wire, dict) or set(wire) != {"name", "version", "source"}:
        raise InvalidObject(
            f"contract object is {received.shown(wire)}: {{name, version, source}}"
        )
    name = received.text(wire["name"], "a contract name", max_len=MAX_NAME, empty=False)
    version = check_version(wire["version"])
    source = received.text(wire["source"], f"contract {name}'s source", max_len=MAX_SOURCE)
    body = parse_contract(source, f"contract {name} v{version}")
    if body["name"] != name:
        raise InvalidObject(f"contract {name} v{version}'s source names {body['name']}")
    cid = contract_id(version, body)
    c = s.contracts.c
    scope = scope_of(body["lines"])
    here = sa.select(c.id).where(c.name == name, c.scope == scope, c.version == version)
    found = conn.execute(here).scalar()
    if found is None:
        if not may_add:
            raise Forbidden(by, f"add contract {name} v{version} by push: that needs an admin")
        if insert_new(conn, s.contracts, _new_row(cid, version, body, source, by)):
            return cid
        found = conn.execute(here).scalar()  # another writer recorded it meanwhile
    if found != cid:
        raise ContractConflict(name, version, found, cid, body["lines"])
    return cid


def contract_show(
    repo: Repo, name: str, version: int | None = None, line: str | None = None
) -> Contract:
    """Contract NAME (version VERSION, else its latest); LINE picks among contracts of that
    name for other lines: the one whose scope covers LINE."""
    with repo.db.read() as conn:
        return _contract(get_row(conn, name, version, line))


def contract_ls(repo: Repo) -> list[Contract]:
    """The latest version of every contract (of each name, in each scope)."""
    c = s.contracts.c
    with repo.db.read() as conn:
        q = sa.select(s.contracts).where(~guard_is_old()).order_by(c.name, c.scope)
        return [_contract(r) for r in conn.execute(q)]


def get_row(conn, name: str, version: int | None = None, line: str | None = None):
    """The contracts row of NAME: version VERSION, else the latest. Where contracts of that
    name are kept for several scopes, the one whose scope covers LINE (the narrowest, a scope
    of globs before every line's); ContractAmbiguous when that does not pick one."""
    c = s.contracts.c
    q = sa.select(s.contracts).where(c.name == name)
    q = q.where(c.version == version) if version else q.where(~guard_is_old())
    rows = conn.execute(q.order_by(c.scope)).all()
    if not rows:
        what = name if not version else f"{name} v{version}"
        raise RevisionNotFound(what, "unknown contract", _near_contracts(conn, name, version))
    if len(rows) == 1:
        return rows[0]
    if line is not None:
        covering = [r for r in rows if covers(r.lines, line)]
        scoped = [r for r in covering if r.scope]
        for choice in (scoped, covering):
            if len(choice) == 1:
                return choice[0]
    raise ContractAmbiguous(name, [r.lines or [] for r in rows], line)


def _near_contracts(conn, name: str, version: int | None) -> list[str]:
    """What an unknown contract may have meant: the latest versions of NAME when it is a
    contract (as "NAME vN"), else the contract names nearest to NAME."""
    c = s.contracts.c
    if version:
        q = sa.select(c.version).where(c.name == name).order_by(c.version.desc()).distinct()
        versions = list(conn.execute(q.limit(SUGGESTIONS)).scalars())
        if versions:
            return [f"{name} v{v}" for v in versions]
    return nearest(name, conn.execute(sa.select(c.name).distinct()).scalars())


def _latest_row(conn, name: str, scope: str):
    c = s.contracts.c
    q = sa.select(s.contracts).where(c.name == name, c.scope == scope)
    return conn.execute(q.order_by(c.version.desc()).limit(1)).first()


def contract_row(conn, cid: str):
    return conn.execute(sa.select(s.contracts).where(s.contracts.c.id == cid)).one()


def guard_is_old():
    """True of a contracts row when a later version of its contract (its name in its scope)
    exists: the latest one alone guards its channel."""
    c, later = s.contracts.c, s.contracts.alias("later")
    return sa.exists().where(
        later.c.name == c.name, later.c.scope == c.scope, later.c.version > c.version
    )


def _contract(row) -> Contract:
    b = row.body
    return Contract(
        ContractId(row.id),
        row.name,
        row.version,
        row.channel,
        b["requires"],
        b["approvals"],
        b["metrics"],
        b["evaluator"],
        b.get("lines"),
        iso(row.created_at),
        row.created_by,
        b.get("live"),
        b.get("signature"),
        b.get("served"),
        b.get("sources"),
    )
