"""The façade: every user operation of mint, one function each. The CLI, the runtime, the
registry server and the tests call these, and nothing below this module calls them.

Functions take an open `Repo` (from `init` or `open_repo`) and return frozen dataclasses
from `mint.objects`; none of them prints, and none reads the environment: the caller
passes who acts (`by=`, `author=`).

Repository     init, open_repo, db_upgrade, fsck, gc
Bases          base_add, base_ls
Commits        commit, resolve, log, show, ls, diff, checkout, adapter_config
Tags           tag, tag_list, tag_delete
Sets           set_commit, set_spec
Contracts      contract_add, contract_show, contract_ls
Evaluations    evaluate, record_evaluation, evaluation_checks
Channels       gate, promote, approve, rollback, history, status
Export         export
Hub            pull, HubSettings

The operations are imported on first use, so that `mint --help` and `mint --version` start
without loading the database layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_OPERATIONS: dict[str, tuple[str, str]] = {
    "init": ("mint.repo", "init"),
    "open_repo": ("mint.repo", "open_repo"),
    "db_upgrade": ("mint.repo", "db_upgrade"),
    "fsck": ("mint.maintenance", "fsck"),
    "gc": ("mint.maintenance", "gc"),
    "base_add": ("mint.bases", "base_add"),
    "base_ls": ("mint.bases", "base_ls"),
    "commit": ("mint.commits.operations", "commit"),
    "resolve": ("mint.commits.operations", "resolve_rev"),
    "log": ("mint.commits.operations", "log"),
    "show": ("mint.commits.operations", "show"),
    "ls": ("mint.commits.operations", "ls"),
    "diff": ("mint.commits.operations", "diff"),
    "checkout": ("mint.commits.operations", "checkout"),
    "adapter_config": ("mint.commits.operations", "adapter_config"),
    "tag": ("mint.refs.tags", "tag"),
    "tag_list": ("mint.refs.tags", "tag_list"),
    "tag_delete": ("mint.refs.tags", "tag_delete"),
    "set_commit": ("mint.sets.operations", "set_commit"),
    "set_spec": ("mint.sets.operations", "set_spec"),
    "contract_add": ("mint.gates.contracts", "contract_add"),
    "contract_show": ("mint.gates.contracts", "contract_show"),
    "contract_ls": ("mint.gates.contracts", "contract_ls"),
    "evaluate": ("mint.gates.evaluator", "run_evaluator"),
    "record_evaluation": ("mint.gates.evaluations", "record"),
    "evaluation_checks": ("mint.gates.promotion", "evaluation_checks"),
    "gate": ("mint.gates.promotion", "gate"),
    "promote": ("mint.gates.promotion", "promote"),
    "approve": ("mint.gates.promotion", "approve"),
    "rollback": ("mint.gates.promotion", "rollback"),
    "history": ("mint.gates.history", "history"),
    "status": ("mint.gates.history", "status"),
    "export": ("mint.export", "export"),
    "pull": ("mint.hub.pull", "pull"),
    "HubSettings": ("mint.hub.settings", "HubSettings"),
}

__all__ = [
    "HubSettings",
    "adapter_config",
    "approve",
    "base_add",
    "base_ls",
    "checkout",
    "commit",
    "contract_add",
    "contract_ls",
    "contract_show",
    "db_upgrade",
    "diff",
    "evaluate",
    "evaluation_checks",
    "export",
    "fsck",
    "gate",
    "gc",
    "history",
    "init",
    "log",
    "ls",
    "open_repo",
    "promote",
    "pull",
    "record_evaluation",
    "resolve",
    "rollback",
    "set_commit",
    "set_spec",
    "show",
    "status",
    "tag",
    "tag_delete",
    "tag_list",
]  # the keys of _OPERATIONS (a test keeps them equal)


def __getattr__(name: str) -> Any:
    try:
        module, attr = _OPERATIONS[name]
    except KeyError:
        raise AttributeError(f"module 'mint.api' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # the next access is a plain attribute lookup
    return value


def __dir__() -> list[str]:
    return __all__


if TYPE_CHECKING:  # what static tools see: the same names, imported eagerly
    from mint.bases import base_add, base_ls
    from mint.commits.operations import (
        adapter_config,
        checkout,
        commit,
        diff,
        log,
        ls,
        show,
    )
    from mint.commits.operations import resolve_rev as resolve
    from mint.export import export
    from mint.gates.contracts import contract_add, contract_ls, contract_show
    from mint.gates.evaluations import record as record_evaluation
    from mint.gates.evaluator import run_evaluator as evaluate
    from mint.gates.history import history, status
    from mint.gates.promotion import approve, evaluation_checks, gate, promote, rollback
    from mint.hub.pull import pull
    from mint.hub.settings import HubSettings
    from mint.maintenance import fsck, gc
    from mint.refs.tags import tag, tag_delete, tag_list
    from mint.repo import db_upgrade, init, open_repo
    from mint.sets.operations import set_commit, set_spec
