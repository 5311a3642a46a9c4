"""Evaluation contracts (versioned by content) and the evaluations recorded under them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import tomllib
from pathlib import Path

import sqlalchemy as sa

from mint import __version__
from mint import refs
from mint import schema as s
from mint.errors import EvaluationFailed, InvalidConfig, RevisionNotFound
from mint.objects import Contract, ContractAdded, ContractId, Evaluation, iso, object_id, utcnow
from mint.repo import Repo, current_user

TOP_KEYS = {"name", "channel", "requires", "approvals", "metric", "evaluator", "lines"}
METRIC_KEYS = {"name", "min", "max", "max_regression"}
EVALUATOR_KEYS = {"command", "timeout", "version", "data"}
DEFAULT_TIMEOUT = 600.0


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
        refs.check_name("contract" if key == "name" else "channel", raw[key])
    requires = raw.get("requires", [])
    if not (isinstance(requires, list) and all(isinstance(r, str) for r in requires)):
        raise bad("'requires' must be a list of channel names")
    for ch in requires:
        refs.check_name("channel", ch)
    approvals = raw.get("approvals", 0)
    if not isinstance(approvals, int) or isinstance(approvals, bool) or approvals < 0:
        raise bad("'approvals' must be a whole number, 0 or more")
    lines = raw.get("lines")
    if lines is not None and not (isinstance(lines, list) and all(isinstance(l, str) for l in lines)):
        raise bad("'lines' must be a list of line names")
    return {
        "name": raw["name"], "channel": raw["channel"], "requires": requires, "approvals": approvals,
        "metrics": [_metric(m, bad) for m in _list_of_tables(raw.get("metric", []), "metric", bad)],
        "evaluator": _evaluator(raw.get("evaluator"), bad), "lines": lines,
    }  # fmt: skip


def _list_of_tables(value, key, bad) -> list[dict]:
    if not (isinstance(value, list) and all(isinstance(v, dict) for v in value)):
        raise bad(f"'{key}' must be an array of tables ([[{key}]])")
    return value


def _metric(m: dict, bad) -> dict:
    unknown = set(m) - METRIC_KEYS
    if unknown:
        raise bad(f"unknown metric key {sorted(unknown)[0]!r} (known: {', '.join(sorted(METRIC_KEYS))})")
    if not isinstance(m.get("name"), str) or not m["name"]:
        raise bad("every [[metric]] needs a name")
    bounds = {k: m[k] for k in ("min", "max", "max_regression") if k in m}
    if not bounds:
        raise bad(f"metric {m['name']!r} sets none of min, max, max_regression")
    for k, v in bounds.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise bad(f"metric {m['name']!r}: {k} must be a number")
    return {"name": m["name"], **{k: float(v) for k, v in bounds.items()}}


def _evaluator(ev, bad) -> dict | None:
    if ev is None:
        return None
    if not isinstance(ev, dict):
        raise bad("[evaluator] must be a table")
    unknown = set(ev) - EVALUATOR_KEYS
    if unknown:
        raise bad(f"unknown evaluator key {sorted(unknown)[0]!r}")
    cmd = ev.get("command")
    if not (isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd)):
        raise bad("evaluator.command must be a non-empty list of strings")
    timeout = ev.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise bad("evaluator.timeout must be a positive number of seconds")
    out = {"command": cmd, "timeout": float(timeout)}
    for key in ("version", "data"):
        if key in ev:
            out[key] = str(ev[key])
    return out


# --- storing and reading -----------------------------------------------------


def contract_add(repo: Repo, path: str | os.PathLike) -> ContractAdded:
    """Add the contract at PATH, or a new version of it when its content changed."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfig(f"cannot read {path}: {exc}") from None
    body = parse_contract(text, str(path))
    with repo.db.write() as conn:
        latest = _latest_row(conn, body["name"])
        if latest is not None and latest.body == body:
            return ContractAdded(_contract(latest), created=False)
        version = 1 if latest is None else latest.version + 1
        cid = object_id({"version": version, "body": body})
        conn.execute(
            s.contracts.insert().values(
                id=cid, name=body["name"], version=version, channel=body["channel"], body=body,
                lines=body["lines"], source=text, created_at=utcnow(), created_by=current_user(),
            )
        )  # fmt: skip
        return ContractAdded(_contract(_row(conn, cid)), created=True)


def contract_show(repo: Repo, name: str, version: int | None = None) -> Contract:
    with repo.db.read() as conn:
        return _contract(get_row(conn, name, version))


def contract_ls(repo: Repo) -> list[Contract]:
    """The latest version of every contract."""
    with repo.db.read() as conn:
        names = [r[0] for r in conn.execute(sa.select(s.contracts.c.name).distinct().order_by(s.contracts.c.name))]
        return [_contract(_latest_row(conn, n)) for n in names]


def get_row(conn, name: str, version: int | None = None):
    q = sa.select(s.contracts).where(s.contracts.c.name == name)
    row = conn.execute(q.where(s.contracts.c.version == version)).first() if version else _latest_row(conn, name)
    if row is None:
        raise RevisionNotFound(name if not version else f"{name} v{version}", "unknown contract")
    return row


def _latest_row(conn, name: str):
    q = sa.select(s.contracts).where(s.contracts.c.name == name)
    return conn.execute(q.order_by(s.contracts.c.version.desc()).limit(1)).first()


def _row(conn, cid: str):
    return conn.execute(sa.select(s.contracts).where(s.contracts.c.id == cid)).one()


def guards(conn, line: str, channel: str) -> list:
    """Latest versions of the contracts guarding LINE@CHANNEL."""
    names = conn.execute(
        sa.select(s.contracts.c.name).where(s.contracts.c.channel == channel).distinct()
    ).scalars()
    rows = [_latest_row(conn, n) for n in sorted(names)]
    return [r for r in rows if r.channel == channel and (not r.lines or line in r.lines)]


def _contract(row) -> Contract:
    b = row.body
    return Contract(
        ContractId(row.id), row.name, row.version, row.channel, b["requires"], b["approvals"],
        b["metrics"], b["evaluator"], b.get("lines"), iso(row.created_at), row.created_by,
    )  # fmt: skip


# --- evaluations ---------------------------------------------------------------


def record(
    repo: Repo, rev: str, contract: str, metrics: dict, *, source: str, evaluator: dict | None = None,
    data_hash: str | None = None,
) -> Evaluation:  # fmt: skip
    """Record an evaluation of REV under the current version of CONTRACT."""
    with repo.db.write() as conn:
        cid = refs.resolve(conn, rev).id
        row = get_row(conn, contract)
        values = check_metrics(row.body, metrics)
        eid = conn.execute(
            s.evaluations.insert().values(
                commit_id=cid, contract_id=row.id, metrics=values, source=source, evaluator=evaluator,
                data_hash=data_hash, by=current_user(), at=utcnow(),
            )
        ).inserted_primary_key[0]  # fmt: skip
        return evaluation(conn, eid)


def check_metrics(body: dict, metrics: dict) -> dict:
    """Every contract metric must be present and numeric; no key outside the contract."""
    names = [m["name"] for m in body["metrics"]]
    unknown = sorted(set(metrics) - set(names))
    if unknown:
        raise EvaluationFailed(f"unknown metric key {unknown[0]!r}: contract {body['name']} has {', '.join(names)}")
    missing = [n for n in names if n not in metrics]
    if missing:
        raise EvaluationFailed(f"missing metric {missing[0]!r} for contract {body['name']}")
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            raise EvaluationFailed(f"metric {k!r} is not a number: {v!r}") from None
        if out[k] != out[k]:
            raise EvaluationFailed(f"metric {k!r} is NaN")
    return out


def evaluation(conn, eid: int) -> Evaluation:
    r = conn.execute(sa.select(s.evaluations).where(s.evaluations.c.id == eid)).one()
    c = _row(conn, r.contract_id)
    return Evaluation(
        r.id, r.commit_id, ContractId(r.contract_id), c.name, c.version, r.metrics, r.source,
        r.evaluator, r.data_hash, r.by, iso(r.at),
    )  # fmt: skip


def latest_evaluation(conn, commit_id: str, contract_id: str):
    q = sa.select(s.evaluations).where(
        s.evaluations.c.commit_id == commit_id, s.evaluations.c.contract_id == contract_id
    )
    return conn.execute(q.order_by(s.evaluations.c.id.desc()).limit(1)).first()


def latest_evaluation_any_version(conn, commit_id: str, name: str):
    q = (
        sa.select(s.evaluations)
        .join(s.contracts, s.contracts.c.id == s.evaluations.c.contract_id)
        .where(s.evaluations.c.commit_id == commit_id, s.contracts.c.name == name)
    )
    return conn.execute(q.order_by(s.contracts.c.version.desc(), s.evaluations.c.id.desc()).limit(1)).first()


def run_evaluator(repo: Repo, rev: str, contract: str) -> Evaluation:
    """Check REV out to a temporary folder, run the contract's evaluator on it, record the result."""
    from mint import api

    with repo.db.read() as conn:
        row = get_row(conn, contract)
        cid = refs.resolve(conn, rev).id
    ev = row.body["evaluator"]
    if not ev:
        raise EvaluationFailed(f"contract {row.name} has no [evaluator]; record results with --metric KEY=VALUE")
    with tempfile.TemporaryDirectory(prefix="mint-eval-") as tmp:
        checkout = Path(tmp) / "checkout"
        api.checkout(repo, cid, checkout)
        argv = [a.replace("{checkout}", str(checkout)).replace("{commit}", cid) for a in ev["command"]]
        metrics = _parse_output(_run(argv, ev["timeout"]), row.body)
    data_hash = _hash_data(ev.get("data"))
    info = {"command": ev["command"], "version": ev.get("version"), "mint": __version__}
    return record(repo, cid, contract, metrics, source="evaluator", evaluator=info, data_hash=data_hash)


def _run(argv: list[str], timeout: float) -> str:
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as exc:
        raise EvaluationFailed(f"evaluator could not start: {exc.strerror or exc}: {argv[0]}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise EvaluationFailed(f"evaluator ran past its timeout of {timeout:g}s and was killed; nothing recorded") from None
    if proc.returncode != 0:
        tail = (err or out).strip().splitlines()[-1:] or [""]
        raise EvaluationFailed(f"evaluator failed with exit status {proc.returncode}: {tail[0][:200]}; nothing recorded")
    return out


def _parse_output(out: str, body: dict) -> dict:
    """One JSON object on stdout (the whole output, or else its last non-empty line)."""
    candidates = [out.strip()] + [l for l in reversed(out.strip().splitlines()) if l.strip()][:1]
    for text in candidates:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            wanted = {m["name"] for m in body["metrics"]}
            missing = sorted(wanted - set(value))
            if missing:
                raise EvaluationFailed(f"evaluator output misses metric {missing[0]!r}; nothing recorded")
            return {k: value[k] for k in wanted}
    raise EvaluationFailed("evaluator printed no valid JSON object of metrics on stdout; nothing recorded")


def _hash_data(path: str | None) -> str | None:
    if not path:
        return None
    from mint.store import sha256_file

    try:
        return sha256_file(path)
    except OSError as exc:
        raise EvaluationFailed(f"evaluator data {path} cannot be read: {exc.strerror}") from None
