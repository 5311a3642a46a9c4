"""One thin call per operation the registry owns: same names, same signatures, same results
as the local functions `mint.backend.local.REPOSITORY_OPERATIONS` names, each one request.

`RemoteBackend` sends the façade's operations here by name when the repository is a
`RemoteRepo`. The registry records the token's identity for every write, so the `by=` and
`author=` arguments are not sent: a client cannot claim another name. Work on files (commit,
checkout, evaluate, export) is the porcelain's, on this machine, over the backend.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from mint.bases import choose_base
from mint.exchange.wire import decode
from mint.objects import Approval, Base, ContractAdded, Evaluation, Move, RefInfo
from mint.remote.canary_ops import canary_of, canary_start, canary_status, canary_stop
from mint.remote.fleet_ops import fleet, fleet_history, fleet_report
from mint.remote.http import segment
from mint.remote.proposal_ops import proposal_close, proposal_ls, proposal_merge, proposal_show
from mint.remote.reads import (
    base_ls,
    contract_ls,
    contract_show,
    diff,
    evaluations_of,  # noqa: F401  (re-exported: the façade dispatches by name)
    gate,
    history,
    latest_evaluation,
    log,
    ls,
    pulled,
    resolve,
    search,
    show,
    status,
    tag_list,
)
from mint.remote.repo import RemoteRepo
from mint.remote.signed_moves import history_verify, signed_move
from mint.remote.signing_ops import (
    attach_signatures,
    key_add,
    key_limit,
    key_ls,
    key_rm,
    signature_prune,
    verify,
)
from mint.remote.team_ops import (
    protect,
    protected_ls,
    token_create,
    token_ls,
    token_revoke,
    unprotect,
    webhook_add,
    webhook_deliveries,
    webhook_ls,
    webhook_rm,
)
from mint.remote.traces_ops import (
    dataset_show,
    record_feedback,
    traces_export,
    traces_ls,
    write_traces,
)

__all__ = [
    "approve",
    "attach_signatures",
    "base_add",
    "base_ls",
    "canary_of",
    "canary_start",
    "canary_status",
    "canary_stop",
    "channel_rm",
    "contract_add",
    "contract_ls",
    "contract_show",
    "dataset_show",
    "diff",
    "evaluation_checks",
    "fleet",
    "fleet_history",
    "fleet_report",
    "gate",
    "history",
    "history_verify",
    "log",
    "ls",
    "promote",
    "proposal_close",
    "proposal_ls",
    "proposal_merge",
    "proposal_show",
    "protect",
    "protected_ls",
    "pulled",
    "record_evaluation",
    "record_feedback",
    "resolve",
    "rollback",
    "search",
    "show",
    "status",
    "tag",
    "tag_delete",
    "tag_list",
    "latest_evaluation",
    "token_create",
    "token_ls",
    "token_revoke",
    "traces_export",
    "traces_ls",
    "unprotect",
    "webhook_add",
    "webhook_deliveries",
    "webhook_ls",
    "webhook_rm",
    "write_traces",
    "key_add",
    "key_limit",
    "key_ls",
    "key_rm",
    "signature_prune",
    "verify",
]


def evaluation_checks(repo: RemoteRepo, ev: Evaluation) -> Evaluation:
    """Attach the per-metric table for the contract's channel on the commit's line (the
    registry's answer to a recorded evaluation carries it already)."""
    if ev.checks:
        return ev
    from mint.gates.checks import metric_checks

    line = log(repo, ev.commit_id, 1)[0].line
    contract = contract_show(repo, ev.contract, ev.version, line)
    holders = [s.channels.get(contract.channel) for s in status(repo) if s.name == line]
    holder = holders[0] if holders else None
    prev = latest_evaluation(repo, holder, contract.name) if holder else None
    body = {"metrics": contract.metrics}
    checks = metric_checks(body, ev.metrics, prev.metrics if prev else None, holder)
    return dataclasses.replace(ev, checks=checks)


# --- writes: the registry records the token's identity -----------------------------------


def base_add(repo: RemoteRepo, name: str, path: str | os.PathLike) -> Base:
    """Register a frozen base on the registry by its config.json (sent as a base object)."""
    from mint.bases import fingerprint, read_base_config
    from mint.refs.revisions import check_name

    check_name("base", name)
    config = read_base_config(path)
    wire = {"name": name, "fingerprint": fingerprint(config), "config": config}
    repo.client.post("/objects", {"bases": [wire], "commits": [], "evaluations": []})
    return choose_base(base_ls(repo), None, name)


def tag(
    repo: RemoteRepo,
    tag_name: str,
    rev: str,
    *,
    by: str,
    message: str | None = None,
    force: bool = False,
) -> RefInfo:
    """Make LINE@TAG point at REV on the registry; moving one needs force (a maintainer's)."""
    body = {"tag": tag_name, "rev": rev, "message": message, "force": force}
    return decode(RefInfo, repo.client.post("/tags", body))


def tag_delete(repo: RemoteRepo, ref: str, *, by: str) -> RefInfo:
    """Delete LINE@TAG on the registry (a maintainer's)."""
    line, _, name = ref.partition("@")
    if not line or not name:
        from mint.errors import RevisionNotFound

        raise RevisionNotFound(ref, "expected LINE@TAG")
    return decode(RefInfo, repo.client.delete(f"/tags/{segment(line)}/{segment(name)}"))


def contract_add(repo: RemoteRepo, path: str | os.PathLike, *, by: str) -> ContractAdded:
    """Add the contract at PATH to the registry (checked here first, then by the registry)."""
    from mint.errors import InvalidConfig
    from mint.gates.contracts import parse_contract

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidConfig(f"cannot read {path}: {exc}") from None
    parse_contract(text, str(path))
    return decode(ContractAdded, repo.client.post("/contracts", {"source": text}))


def record_evaluation(
    repo: RemoteRepo,
    rev: str,
    contract: str,
    metrics: dict,
    *,
    source: str,
    evaluator: dict | None = None,
    data_hash: str | None = None,
    by: str,
) -> Evaluation:
    """Record an evaluation of REV under the current version of CONTRACT on the registry."""
    body = {
        "rev": rev,
        "contract": contract,
        "metrics": metrics,
        "source": str(source),
        "evaluator": evaluator,
        "data_hash": data_hash,
    }
    return decode(Evaluation, repo.client.post("/evaluations", body))


def approve(repo: RemoteRepo, rev: str, channel: str, *, by: str) -> Approval:
    """Record the token's approval of REV for CHANNEL."""
    return decode(Approval, repo.client.post("/approvals", {"rev": rev, "channel": channel}))


def promote(
    repo: RemoteRepo,
    rev: str,
    channel: str,
    *,
    by: str,
    contract: str | None = None,
    force: bool = False,
    reason: str | None = None,
    create: bool = False,
    sign: str | os.PathLike | None = None,
    password: str | None = None,
) -> Move:
    """Move LINE@CHANNEL to REV on the registry if its gate passes (or with force); creating
    a channel a typo's distance from a known one needs CREATE. With SIGN, signed here with
    that private key (which is never sent: `mint.remote.signed_moves`)."""
    from mint.gates.checks import check_forced  # the same words as locally, before sending

    check_forced(force, reason, channel)
    body = {"rev": rev, "channel": channel, "contract": contract, "force": force, "reason": reason}
    if create:  # sent only when given: a registry that predates it still takes the rest
        body["create"] = True
    if sign is not None:
        return signed_move(repo, "/promote", body, channel, sign, password)
    return decode(Move, repo.client.post("/promote", body))


def rollback(
    repo: RemoteRepo,
    ref: str,
    *,
    by: str,
    to: str | None = None,
    reason: str | None = None,
    sign: str | os.PathLike | None = None,
    password: str | None = None,
) -> Move:
    """Move LINE@CHANNEL back on the registry, to its previous holder or to TO; with SIGN,
    signed here as `promote` signs."""
    body = {"ref": ref, "to": to, "reason": reason}
    if sign is not None:
        return signed_move(repo, "/rollback", body, ref.partition("@")[2], sign, password)
    return decode(Move, repo.client.post("/rollback", body))


def channel_rm(repo: RemoteRepo, ref: str, *, by: str) -> Move:
    """Remove LINE@CHANNEL on the registry (a maintainer's; never a protected channel)."""
    line, _, channel = ref.partition("@")
    if not line or not channel:
        from mint.errors import RevisionNotFound

        raise RevisionNotFound(ref, "expected LINE@CHANNEL")
    return decode(Move, repo.client.delete(f"/channels/{segment(line)}/{segment(channel)}"))
