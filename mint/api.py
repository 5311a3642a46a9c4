"""The façade: every user operation of mint, one function each. The CLI, the runtime, the
registry server and the tests call these, and nothing below this module calls them.

Functions take an open `Repo` (from `init` or `open_repo`) and return frozen dataclasses
from `mint.objects`; none of them prints, and none reads the environment: the caller
passes who acts (`by=`, `author=`).

Repository     init, open_repo, db_upgrade, fsck, gc
Bases          base_add, base_ls
Commits        commit, resolve, log, show, ls, diff, checkout, adapter_config, search
Tags           tag, tag_list, tag_delete
Sets           set_commit, set_spec, set_derive, candidates
Merges         merge, merge_replay
Contracts      contract_add, contract_show, contract_ls
Evaluations    evaluate, record_evaluation, record_harness, evaluation_checks, evaluations_of
Channels       gate, promote, approve, rollback, channel_rm, history, history_verify, status
Canaries       canary_of, canary_start, canary_stop, canary_status
What serves    fleet_report, fleet, fleet_history, fleet_wait
The loop       improve
Traces         traces_ls, traces_export, record_feedback, write_traces, dataset_show
Export         export
Hub            pull, HubSettings
Remotes        remote_add, remote_ls, remote_remove, push, fetch, clone, login,
               remote_refs, remote_refs_forget
Registry       token_create, token_ls, token_revoke, protect, unprotect, protected_ls
Webhooks       webhook_add, webhook_ls, webhook_rm, webhook_deliveries
Signing        key_generate, key_add, key_ls, key_rm, key_limit, verify, verify_folder,
               signature_prune
Proposals      proposal_ls, proposal_show, proposal_merge, proposal_close (and commit's,
               set_derive's propose=)

The operations are imported on first use, so that `mint --help` and `mint --version` start
without loading the database layer.

`open_repo(URL, token=...)` opens a registry (a `mint.remote.repo.RemoteRepo`), as
`MlflowClient(tracking_uri)` and `HfApi(endpoint)` take a URL. Against a registry: the
client-side operations (commit, set commit and derive, candidates,
checkout, export, set spec, evaluate) are written once in `mint.porcelain` over a repository
backend, local or remote (`mint.backend`); an operation the repository owns, given a
`mint.remote.repo.RemoteRepo` (what `--repo URL` opens), is sent to the registry by the
remote backend. Those marked local in `_OPERATIONS` need the repository's own database and
store, and say so in one error (`LocalOnly`) when given a registry or a URL.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

# How an operation runs. _ONCE: written once over the repository backend (mint.porcelain),
# the same function for a local repository and a registry. _ANY: an operation the repository
# owns: here for a local repository, a request to the registry for a remote one (through
# `mint.backend.backend_of(repo)`). _LOCAL: only where the repository is. _PLAIN: it takes no
# repository first (clone takes a URL, login a URL and a token).
_ONCE, _ANY, _LOCAL, _PLAIN = "once", "any", "local", "plain"

# name -> (module, attribute, where it runs)
_OPERATIONS: dict[str, tuple[str, str, str]] = {
    "init": ("mint.repo", "init", _LOCAL),
    "open_repo": ("mint.api", "_open_repo", _PLAIN),  # a folder or a registry's URL: below
    "db_upgrade": ("mint.repo", "db_upgrade", _LOCAL),
    "fsck": ("mint.maintenance", "fsck", _LOCAL),
    "gc": ("mint.maintenance", "gc", _LOCAL),
    "base_add": ("mint.bases", "base_add", _ANY),
    "base_ls": ("mint.bases", "base_ls", _ANY),
    "commit": ("mint.porcelain.commit", "commit", _ONCE),
    "resolve": ("mint.commits.repository", "resolve_rev", _ANY),
    "log": ("mint.commits.repository", "log", _ANY),
    "search": ("mint.search", "search", _ANY),
    "show": ("mint.commits.repository", "show", _ANY),
    "ls": ("mint.commits.repository", "ls", _ANY),
    "diff": ("mint.commits.repository", "diff", _ANY),
    "checkout": ("mint.porcelain.files", "checkout", _ONCE),
    "adapter_config": ("mint.porcelain.files", "adapter_config", _ONCE),
    "tag": ("mint.refs.tags", "tag", _ANY),
    "tag_list": ("mint.refs.tags", "tag_list", _ANY),
    "tag_delete": ("mint.refs.tags", "tag_delete", _ANY),
    "set_commit": ("mint.porcelain.commit", "set_commit", _ONCE),
    "set_spec": ("mint.porcelain.files", "set_spec", _ONCE),
    "set_derive": ("mint.porcelain.commit", "set_derive", _ONCE),
    "candidates": ("mint.porcelain.commit", "candidates", _ONCE),
    "merge": ("mint.porcelain.merge", "merge", _ONCE),
    "merge_replay": ("mint.porcelain.merge", "merge_replay", _ONCE),
    "contract_add": ("mint.gates.contracts", "contract_add", _ANY),
    "contract_show": ("mint.gates.contracts", "contract_show", _ANY),
    "contract_ls": ("mint.gates.contracts", "contract_ls", _ANY),
    "evaluate": ("mint.porcelain.evaluate", "evaluate", _ONCE),
    "record_evaluation": ("mint.gates.evaluations", "record", _ANY),
    "record_harness": ("mint.porcelain.harness", "record_harness", _ONCE),
    "evaluation_checks": ("mint.gates.promotion", "evaluation_checks", _ANY),
    "gate": ("mint.gates.promotion", "gate", _ANY),
    "promote": ("mint.gates.promotion", "promote", _ANY),
    "approve": ("mint.gates.promotion", "approve", _ANY),
    "rollback": ("mint.gates.promotion", "rollback", _ANY),
    "channel_rm": ("mint.gates.promotion", "channel_rm", _ANY),
    "history": ("mint.gates.history", "history", _ANY),
    "history_verify": ("mint.gates.signed", "history_verify", _ANY),
    "status": ("mint.gates.history", "status", _ANY),
    "canary_of": ("mint.gates.canary", "canary_of", _ANY),
    "canary_start": ("mint.gates.canary", "canary_start", _ANY),
    "canary_stop": ("mint.gates.canary", "canary_stop", _ANY),
    "canary_status": ("mint.gates.canary", "canary_status", _ANY),
    "fleet_report": ("mint.fleet.records", "fleet_report", _ANY),
    "fleet": ("mint.fleet.reads", "fleet", _ANY),
    "fleet_history": ("mint.fleet.reads", "fleet_history", _ANY),
    "fleet_wait": ("mint.porcelain.fleet_wait", "fleet_wait", _ONCE),
    "improve": ("mint.porcelain.improve", "improve", _ONCE),
    "traces_ls": ("mint.traces.records", "traces_ls", _ANY),
    "traces_export": ("mint.traces.export", "traces_export", _ANY),
    "record_feedback": ("mint.traces.records", "record_feedback", _ANY),
    "write_traces": ("mint.traces.records", "write_traces", _ANY),
    "dataset_show": ("mint.traces.export", "dataset_show", _ANY),
    "export": ("mint.porcelain.files", "export", _ONCE),
    "pull": ("mint.porcelain.pull", "pull", _ONCE),
    "HubSettings": ("mint.hf.settings", "HubSettings", _PLAIN),
    "evaluations_of": ("mint.gates.evaluations", "evaluations_of", _ANY),
    "remote_add": ("mint.remote.config", "remote_add", _PLAIN),
    "remote_ls": ("mint.remote.config", "remote_ls", _PLAIN),
    "remote_remove": ("mint.remote.config", "remote_remove", _PLAIN),
    "push": ("mint.remote.transfer_client", "push", _LOCAL),
    "fetch": ("mint.remote.fetch_client", "fetch", _LOCAL),
    "clone": ("mint.remote.fetch_client", "clone", _PLAIN),
    "login": ("mint.remote.config", "login", _PLAIN),
    "remote_refs": ("mint.refs.remote_refs", "remote_refs", _LOCAL),
    "remote_refs_forget": ("mint.refs.remote_refs", "remote_refs_forget", _LOCAL),
    "token_create": ("mint.team.tokens", "token_create", _ANY),
    "token_ls": ("mint.team.tokens", "token_ls", _ANY),
    "token_revoke": ("mint.team.tokens", "token_revoke", _ANY),
    "protect": ("mint.team.protection", "protect", _ANY),
    "unprotect": ("mint.team.protection", "unprotect", _ANY),
    "protected_ls": ("mint.team.protection", "protected_ls", _ANY),
    "webhook_add": ("mint.team.webhooks", "webhook_add", _ANY),
    "webhook_ls": ("mint.team.webhooks", "webhook_ls", _ANY),
    "webhook_rm": ("mint.team.webhooks", "webhook_rm", _ANY),
    "key_generate": ("mint.signing.keys", "key_generate", _PLAIN),
    "key_add": ("mint.signing.keys", "key_add", _ANY),
    "key_ls": ("mint.signing.keys", "key_ls", _ANY),
    "key_rm": ("mint.signing.keys", "key_rm", _ANY),
    "key_limit": ("mint.signing.trust", "key_limit", _ANY),
    "signature_prune": ("mint.signing.stored", "signature_prune", _ANY),
    "verify": ("mint.signing.commits", "verify", _ANY),
    "verify_folder": ("mint.porcelain.signed", "verify_folder", _ONCE),
    "webhook_deliveries": ("mint.team.webhooks", "webhook_deliveries", _ANY),
    "proposal_ls": ("mint.proposals", "proposal_ls", _ANY),
    "proposal_show": ("mint.proposals", "proposal_show", _ANY),
    "proposal_merge": ("mint.proposals", "proposal_merge", _ANY),
    "proposal_close": ("mint.proposals", "proposal_close", _ANY),
}

__all__ = [
    "HubSettings",
    "adapter_config",
    "approve",
    "base_add",
    "base_ls",
    "canary_of",
    "canary_start",
    "canary_status",
    "canary_stop",
    "candidates",
    "channel_rm",
    "checkout",
    "clone",
    "commit",
    "contract_add",
    "contract_ls",
    "contract_show",
    "dataset_show",
    "db_upgrade",
    "diff",
    "evaluate",
    "evaluation_checks",
    "evaluations_of",
    "export",
    "fetch",
    "fleet",
    "fleet_history",
    "fleet_report",
    "fleet_wait",
    "fsck",
    "gate",
    "gc",
    "history",
    "history_verify",
    "improve",
    "init",
    "key_add",
    "key_generate",
    "key_limit",
    "key_ls",
    "key_rm",
    "log",
    "login",
    "ls",
    "merge",
    "merge_replay",
    "open_repo",
    "promote",
    "proposal_close",
    "proposal_ls",
    "proposal_merge",
    "proposal_show",
    "protect",
    "protected_ls",
    "pull",
    "push",
    "record_evaluation",
    "record_feedback",
    "record_harness",
    "remote_add",
    "remote_ls",
    "remote_refs",
    "remote_refs_forget",
    "remote_remove",
    "resolve",
    "rollback",
    "search",
    "set_commit",
    "set_derive",
    "set_spec",
    "show",
    "signature_prune",
    "status",
    "tag",
    "tag_delete",
    "tag_list",
    "token_create",
    "token_ls",
    "token_revoke",
    "traces_export",
    "traces_ls",
    "unprotect",
    "verify",
    "verify_folder",
    "webhook_add",
    "webhook_deliveries",
    "webhook_ls",
    "webhook_rm",
    "write_traces",
]  # the keys of _OPERATIONS (a test keeps them equal)


def __getattr__(name: str) -> Any:
    try:
        module, attr, anywhere = _OPERATIONS[name]
    except KeyError:
        raise AttributeError(f"module 'mint.api' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    if anywhere in (_ANY, _LOCAL):
        value = _dispatching(name, value, anywhere == _ANY)
    globals()[name] = value  # the next access is a plain attribute lookup
    return value


def _dispatching(name: str, local: Any, anywhere: bool) -> Any:
    """LOCAL, or for a registry its backend's operation NAME (one request to the registry)."""

    from mint.ids import is_url

    @functools.wraps(local)
    def operation(*args: Any, **kwargs: Any) -> Any:
        target = args[0] if args else kwargs.get("repo", kwargs.get("path"))
        remote_repo = getattr(target, "is_remote", False) is True
        url = is_url(target)
        if not (remote_repo or url):
            return local(*args, **kwargs)
        if url or not anywhere:
            from mint.errors import LocalOnly

            raise LocalOnly(name.replace("_", " "))
        rest = {k: v for k, v in kwargs.items() if k != "repo"}
        return getattr(target.backend, name)(*args[1:], **rest)

    return operation


def _open_repo(
    where=None,
    *,
    token: str | None = None,
    cache: Path | str | None = None,
    check_schema: bool = True,
):
    """The repository WHERE is: a registry's URL (http:// or https://) as a `RemoteRepo`
    acting with TOKEN (None: none sent) and keeping downloaded blobs in CACHE; otherwise the
    local repository at that folder, or found by walking up from the current one
    (`mint.repo.open_repo`, CHECK_SCHEMA as there). Every `mint.api` function takes either.
    The token is not read from the environment: pass it (`os.environ["MINT_TOKEN"]`)."""
    from mint.ids import is_url

    if is_url(where):
        from mint.remote.repo import RemoteRepo

        return RemoteRepo(str(where), token, cache=Path(cache) if cache is not None else None)
    if token is not None or cache is not None:
        raise TypeError("token and cache are for a registry's URL, not a folder")
    from mint.repo import open_repo as open_local

    return open_local(where, check_schema=check_schema)


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # what static tools see: the same names, imported eagerly
    open_repo = _open_repo
    from mint.bases import base_add, base_ls
    from mint.commits.repository import diff, log, ls, show
    from mint.commits.repository import resolve_rev as resolve
    from mint.fleet.reads import fleet, fleet_history
    from mint.fleet.records import fleet_report
    from mint.gates.canary import canary_of, canary_start, canary_status, canary_stop
    from mint.gates.contracts import contract_add, contract_ls, contract_show
    from mint.gates.evaluations import evaluations_of
    from mint.gates.evaluations import record as record_evaluation
    from mint.gates.history import history, status
    from mint.gates.promotion import (
        approve,
        channel_rm,
        evaluation_checks,
        gate,
        promote,
        rollback,
    )
    from mint.gates.signed import history_verify
    from mint.hf.settings import HubSettings
    from mint.maintenance import fsck, gc
    from mint.porcelain.commit import candidates, commit, set_commit, set_derive
    from mint.porcelain.evaluate import evaluate
    from mint.porcelain.files import adapter_config, checkout, export, set_spec
    from mint.porcelain.fleet_wait import fleet_wait
    from mint.porcelain.harness import record_harness
    from mint.porcelain.improve import improve
    from mint.porcelain.merge import merge, merge_replay
    from mint.porcelain.pull import pull
    from mint.porcelain.signed import verify_folder
    from mint.proposals import proposal_close, proposal_ls, proposal_merge, proposal_show
    from mint.refs.remote_refs import remote_refs, remote_refs_forget
    from mint.refs.tags import tag, tag_delete, tag_list
    from mint.remote.config import login, remote_add, remote_ls, remote_remove
    from mint.remote.fetch_client import clone, fetch
    from mint.remote.transfer_client import push
    from mint.repo import db_upgrade, init
    from mint.search import search
    from mint.signing.commits import verify
    from mint.signing.keys import key_add, key_generate, key_ls, key_rm
    from mint.signing.stored import signature_prune
    from mint.signing.trust import key_limit
    from mint.team.protection import protect, protected_ls, unprotect
    from mint.team.tokens import token_create, token_ls, token_revoke
    from mint.team.webhooks import webhook_add, webhook_deliveries, webhook_ls, webhook_rm
    from mint.traces.export import dataset_show, traces_export
    from mint.traces.records import record_feedback, traces_ls, write_traces
