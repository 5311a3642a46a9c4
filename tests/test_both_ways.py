"""Every command both ways: against a local repository (`--repo PATH`) and against a registry
(`--repo URL`, a real `mint registry serve`), compared field by field in their `--json`.

One history is built twice, by running the same commands through the real CLI on a local
repository and on a registry over its own repository. Then every read runs on both and every
write runs on both, the registry first, and the two answers must be equal once what must
differ is put aside: times (each side stamps its own), and so the commit ids that hash them,
which are paired by their place in `mint log` (the same commands in the same order give the
same log), and the folders each side writes into. Errors must be equal too: exit code and
the lines on stderr. The fields known to differ are listed with why (`ENTRY_IDS`,
`BASE_SOURCE`, `LOOP_BY`); nothing is marked as not working through a registry.

Every command of `mint --help`'s tree is run here both ways, or is in `LOCAL_ONLY` (it must
say in one line that it runs where the repository is) or in `EXCLUDED` with a reason;
`test_every_command_is_run_both_ways_or_excluded` fails on one that is in none, so a new
command cannot be forgotten.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest

from mint import api
from mint.cli import cli, run_in_process
from mint.remote.repo import RemoteRepo

from conftest import Result
from support.hubserver import HubServer
from support.registry import create_token, start_registry

# One xdist worker runs the whole module, so that the two sides are built once.
pytestmark = pytest.mark.xdist_group("both_ways")

USER = "alice"  # MINT_USER locally, and the registry token's name: authors and `by` match

# --- the files the commands read (the same on both sides) ----------------------------------

MOL = """
name = "{name}"
protocol = "mol/1"
base = "tiny-llama"
[router]
adapter = "{router}"
labels = ["chat", "coding"]
prompt = "route.md"
default = "chat"
[experts]
chat = "chat"
coding = "coding"
[summary]
adapter = "summary"
prompt = "summary.md"
"""

# A stand-in for a benchmark: every checkout scores 0.8.
EVALUATOR = 'import json; print(json.dumps({"score": 0.8}))'

QUALITY = """
name = "quality"
channel = "staging"
[[metric]]
name = "score"
min = 0.5
max_regression = 0.05
[evaluator]
command = {command}
[live]
min_score = 0.5
max_drop = 0.05
min_traces = 5
"""

REVIEW = """
name = "review"
channel = "review"
approvals = 1
[[metric]]
name = "acc"
min = {floor}
"""


def write_inputs(data: Path) -> None:
    """mol.toml files for the sets macaron and tartine, contracts, routing examples."""
    sets = [("macaron", "macaron", "router"), ("tartine", "tartine", "router~1")]
    sets.append(("tartine2", "tartine", "router"))  # the second version of tartine
    for folder_name, name, router in sets:
        folder = data / folder_name
        folder.mkdir(parents=True)
        (folder / "mol.toml").write_text(MOL.format(name=name, router=router))
        (folder / "route.md").write_text("Route the request to one expert.\n")
        (folder / "summary.md").write_text("Summarise the turn.\n")
    command = json.dumps([sys.executable, "-c", EVALUATOR, "{checkout}"])
    (data / "quality.toml").write_text(QUALITY.format(command=command))
    (data / "review.toml").write_text(REVIEW.format(floor=0.5))
    (data / "review2.toml").write_text(REVIEW.format(floor=0.6))
    examples = [("hello there", "chat"), ("fix my python loop", "coding")] * 2
    (data / "route.jsonl").write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": t}], "label": label}) + "\n"
            for t, label in examples
        )
    )


def trace_rows(n: int = 3) -> list[dict]:
    """Turns as `mint serve` records them (written through the same `api.write_traces` it
    uses), with fixed ids and times so that both sides hold the same rows."""
    labels = ["chat", "coding", "chat"]
    return [
        {
            "id": f"chatcmpl-both-{i}",
            "at": dt.datetime(2025, 1, i + 1, 12, tzinfo=dt.UTC),
            "set_line": "macaron",
            "set_commit": None,  # the side's own macaron head, filled in by the caller
            "variant": "production",
            "label": labels[i],
            "probs": {"chat": 0.7, "coding": 0.3},
            "expert_commit": None,
            "user": "dee",
            "messages": [{"role": "user", "content": f"question {i} ☃"}],
            "response": f"answer {i}",
            "latency": {"total": 0.01 * (i + 1)},
        }
        for i in range(n)
    ]


# --- running a command on both sides and comparing ------------------------------------------

_HEX = re.compile(r"[0-9a-f]{12,64}")
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?$")


@dataclass
class Side:
    name: str  # "local" or "remote"
    repo: str  # --repo: a folder or a URL
    work: Path  # where this side's checkouts and exports go
    values: dict  # the placeholders of an argument list: {A1}, {data}, ...

    def run(self, args: tuple[str, ...]) -> Result:
        argv = [a.format(**self.values, work=self.work) for a in args]
        return Result(*run_in_process(["--repo", self.repo, *argv]))


@dataclass
class Both:
    """The two sides, and what pairs their commit ids (remote id -> local id)."""

    local: Side
    remote: Side
    ids: dict[str, str] = field(default_factory=dict)
    not_ids: set[str] = field(default_factory=set)  # hex runs that name no commit (blobs)
    learned: bool = False  # whether the logs were read since the last command
    answers: dict[str, list[tuple[Result, Result]]] = field(default_factory=dict)  # by case

    def run(self, args: tuple[str, ...]) -> tuple[Result, Result]:
        """ARGS on the registry, then locally (unless the registry failed where the local
        repository would not: then both sides keep the same history)."""
        self.learned = False
        remote = self.remote.run(args)
        if remote.code not in (0, 3) and not remote.err.startswith("mint: error:"):
            return remote, Result(-1, "", "not run: the registry failed unexpectedly")
        if remote.code != 0 and "runs only where the repository is" in remote.err:
            return remote, Result(0, "", "not run: the registry refused it as local-only")
        return remote, self.local.run(args)

    def run_case(self, case: Case) -> list[tuple[Result, Result]]:
        """The case's (remote, local) answers: its BEFORE, itself, its THEN."""
        out = [self.run(args) for args in case.before]
        remote, local = self.run(case.args)
        out.append((remote, local))
        for then in case.then:
            if callable(then) and local.code != 0:
                break  # no answer to take the next arguments from
            out.append(self.run(then(local.json()) if callable(then) else then))
        return out

    def learn_ids(self) -> None:
        """Pair the commit ids of the two sides by their place in `mint log`."""
        local, remote = (side.run(("log", "--json")) for side in (self.local, self.remote))
        assert local.code == remote.code == 0, (local, remote)
        mine, theirs = local.json(), remote.json()

        def shape(log):  # messages may name commits (the loop's do): their digits aside
            return [(c["line"], c["kind"], _HEX.sub("<id>", c["message"])) for c in log]

        assert shape(mine) == shape(theirs), "the two sides' logs differ"
        self.ids.update({r["id"]: c["id"] for c, r in zip(mine, theirs)})
        self.learned = True

    def normal(self, value, side: Side):
        """VALUE with what must differ put aside: times, the registry's commit ids (as the
        local ids they pair with), this side's folders."""
        if isinstance(value, dict):
            return {k: self.normal(v, side) for k, v in value.items()}
        if isinstance(value, list):
            return [self.normal(v, side) for v in value]
        if not isinstance(value, str):
            return value
        if _TIME.match(value):
            return "<time>"
        value = value.replace(str(side.work), "<work>").replace(side.repo, "<repo>")
        if side is self.remote:
            value = _HEX.sub(lambda m: self._local_id(m.group()), value)
        return value

    def _local_id(self, hexes: str) -> str:
        """The local commit id (or 12-digit short id) paired with the registry's HEXES."""
        if len(hexes) not in (12, 64) or hexes in self.not_ids:
            return hexes
        found = [local for remote, local in self.ids.items() if remote.startswith(hexes)]
        if not found and not self.learned:  # a commit made since the logs were read, or a blob
            self.learn_ids()
            found = [local for remote, local in self.ids.items() if remote.startswith(hexes)]
        if not found:
            self.not_ids.add(hexes)
        return found[0][: len(hexes)] if len(found) == 1 else hexes

    def compare(self, remote: Result, local: Result, known: tuple[str, ...] = ()) -> set[str]:
        """Equal exit codes, equal error lines, equal JSON field by field but the KNOWN
        fields (paths with [*] for list indices); returns those of KNOWN that differed."""
        assert remote.code == local.code, f"exit codes: local {local}, remote {remote}"
        assert local.code in (0, 3) or local.err.startswith("mint: error:"), local
        errors = [self.normal(r.err, s) for r, s in ((local, self.local), (remote, self.remote))]
        assert errors[0] == errors[1], f"stderr: local {errors[0]!r}, remote {errors[1]!r}"
        if not local.out.strip() and not remote.out.strip():
            return set()
        mine = self.normal(json.loads(local.out), self.local)
        theirs = self.normal(json.loads(remote.out), self.remote)
        found = [
            (re.sub(r"\[\d+\]", "[*]", path), text) for path, text in differences(mine, theirs)
        ]
        unknown = [text for path, text in found if path not in known]
        assert not unknown, "local and remote --json differ:\n  " + "\n  ".join(unknown)
        return {path for path, _ in found}


def differences(local, remote, path: str = "$") -> list[tuple[str, str]]:
    """Where LOCAL and REMOTE differ: (path, a line with the path and both values) each."""
    if isinstance(local, dict) and isinstance(remote, dict):
        out = []
        for key in [*local, *(k for k in remote if k not in local)]:
            where = f"{path}.{key}"
            if key not in remote:
                out.append((where, f"{where}: only local ({local[key]!r})"))
            elif key not in local:
                out.append((where, f"{where}: only remote ({remote[key]!r})"))
            else:
                out += differences(local[key], remote[key], where)
        return out
    if isinstance(local, list) and isinstance(remote, list):
        out = []
        if len(local) != len(remote):
            out.append((path, f"{path}: {len(local)} items locally, {len(remote)} remotely"))
        for i, (a, b) in enumerate(zip(local, remote)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    if type(local) is type(remote) and local == remote:
        return []
    return [(path, f"{path}: local {local!r}, remote {remote!r}")]


# --- the cases -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A command run both ways; BEFORE runs first on both sides, THEN are reads run after it
    (an argument list, or a function of the local answer's JSON), all compared. KNOWN are
    fields (paths as `differences` names them, list indices as [*]) known to differ: the
    case fails if any other field differs, and also once none of them differs any more, as
    a strict xfail does, so that the lists below shrink as they are fixed."""

    args: tuple[str, ...]
    id: str
    before: tuple[tuple[str, ...], ...] = ()
    then: tuple[tuple[str, ...] | Callable[[dict], tuple[str, ...]], ...] = ()
    known: tuple[str, ...] = ()
    marks: tuple = ()

    def param(self):
        return pytest.param(self, id=self.id, marks=self.marks)


# Known differences. Issue 20: a commit through a registry moves its line's head with
# `RefsContainer.move_head`, which logs the move in ref_history (as a push does); a local
# commit's `advance_head` logs none. So every later history entry id (`history`, the moves of
# promote, rollback and channel rm, canary ids, a webhook's cursor, the entries of improve's
# steps) is higher on the registry: 6 against 1 for the first promote here.
ENTRY_IDS = ("$.id", "$[*].id", "$.canary.id", "$.cursor", "$[*].cursor", "$.steps[*].entry")
# By design (`Backend.acting`): through a registry a write is recorded under the token's
# name, since a client cannot claim another; so the loop's moves and canaries are by alice
# there, by "mint-loop" locally.
LOOP_BY = ("$[*].by", "$.canary.started_by", "$.canary.stopped_by")
# Not a bug: a base's `source` is the folder `mint base add` read on the machine that ran
# it; a registry keeps no client's folder (None).
BASE_SOURCE = ("$.source", "$[*].source")


SETUP: list[Case] = [
    Case(("base", "add", "tiny-llama", "{BASE}", "--json"), "setup-base-add", known=BASE_SOURCE),
    Case(
        ("commit", "router", "{A1}", "-m", "router v1", "--meta", "lr=0.001", "--json"),
        "setup-commit-router",
    ),
    Case(("commit", "chat", "{A2}", "-m", "chat", "--json"), "setup-commit-chat"),
    Case(("commit", "coding", "{A3}", "-m", "coding", "--json"), "setup-commit-coding"),
    Case(("commit", "summary", "{A2}", "-m", "summary", "--json"), "setup-commit-summary"),
    Case(
        ("set", "commit", "{data}/macaron/mol.toml", "-m", "first", "--json"), "setup-set-commit"
    ),
    Case(("contract", "add", "{data}/quality.toml", "--json"), "setup-contract-add"),
    Case(("eval", "macaron", "--contract", "quality", "--json"), "setup-eval"),
    Case(("promote", "macaron", "--to", "staging", "--json"), "setup-promote-1", known=ENTRY_IDS),
    Case(
        ("promote", "macaron", "--to", "production", "--json"), "setup-promote-2", known=ENTRY_IDS
    ),
    Case(("commit", "router", "{A2}", "-m", "router v2", "--json"), "setup-commit-router-v2"),
    Case(("tag", "v1", "router~1", "-m", "the first router", "--json"), "setup-tag"),
]

ROUTE_EVAL = ("route-eval", "macaron", "--data", "{data}/route.jsonl", "--base-dir", "{BASE}")

READS: list[Case] = [
    Case(("log", "--json"), "log"),
    Case(("log", "router", "--json"), "log-line"),
    Case(("log", "macaron", "-n", "1", "--json"), "log-n"),
    Case(("log", "nowhere", "--json"), "log-unknown-line"),
    Case(("show", "router", "--json"), "show-adapter"),
    Case(("show", "router@v1", "--json"), "show-tag"),
    Case(("show", "macaron", "--json"), "show-set"),
    Case(("show", "macaron@production~0", "--json"), "show-channel"),
    Case(("show", "nowhere", "--json"), "show-unknown"),
    Case(("ls", "--json"), "ls"),
    Case(("ls", "--limit", "2", "--after", "chat", "--json"), "ls-page"),
    Case(("status", "--json"), "status"),
    Case(("search", "--line", "r*", "--json"), "search-line"),
    Case(("search", "--meta", "novalue", "--json"), "search-bad"),
    Case(("status", "--limit", "1", "--json"), "status-page"),
    Case(("diff", "router~1", "router", "--json"), "diff"),
    Case(("diff", "chat", "coding", "--json"), "diff-shapes"),
    Case(("diff", "router", "nowhere", "--json"), "diff-unknown"),
    Case(("tag", "--json"), "tag-list"),
    Case(("tag", "--list", "router", "--json"), "tag-list-line"),
    Case(("contract", "ls", "--json"), "contract-ls"),
    Case(("contract", "show", "quality", "--json"), "contract-show"),
    Case(("contract", "show", "quality", "--version", "1", "--json"), "contract-show-version"),
    Case(("contract", "show", "nope", "--json"), "contract-show-unknown"),
    Case(("gate", "macaron", "--to", "staging", "--json"), "gate-passes"),
    Case(("gate", "router", "--to", "staging", "--json"), "gate-refuses"),
    Case(("history", "macaron@production", "--json"), "history", known=ENTRY_IDS),
    Case(("history", "macaron@staging", "-n", "1", "--json"), "history-n", known=ENTRY_IDS),
    Case(("history", "macaron@nowhere", "--json"), "history-unknown"),
    Case(("base", "ls", "--json"), "base-ls", known=BASE_SOURCE),
    Case(("traces", "ls", "--json"), "traces-ls"),
    Case(("traces", "ls", "--set", "macaron", "--label", "coding", "--json"), "traces-ls-filter"),
    Case(("canary", "status", "macaron@production", "--json"), "canary-status-none"),
    Case(("candidates", "macaron@production", "--json"), "candidates"),
    Case(("candidates", "macaron@production", "--line", "router", "--json"), "candidates-line"),
]

WRITES: list[Case] = [
    Case(
        ("commit", "w-commit", "{A1}", "-m", "first", "--meta", "lr=0.1", "--json"),
        "commit",
        then=(("show", "w-commit", "--json"), ("log", "w-commit", "--json")),
    ),
    Case(("commit", "w-commit", "{A1}", "-m", "again", "--json"), "commit-unchanged"),
    Case(
        ("commit", "w-commit", "{A3}", "-m", "second", "--json"),
        "commit-second",
        then=(("diff", "w-commit~1", "w-commit", "--json"),),
    ),
    Case(("commit", "w-commit", "{data}", "-m", "not an adapter", "--json"), "commit-refused"),
    Case(
        ("tag", "v1", "w-commit~1", "-m", "first one", "--json"),
        "tag",
        then=(("tag", "--list", "w-commit", "--json"),),
    ),
    Case(("tag", "v1", "w-commit", "--json"), "tag-exists"),
    Case(("tag", "v1", "w-commit", "--force", "-m", "moved", "--json"), "tag-force"),
    Case(("tag", "-d", "w-commit@v1", "--json"), "tag-delete"),
    Case(
        ("set", "commit", "{data}/tartine/mol.toml", "-m", "tartine v1", "--json"),
        "set-commit",
        then=(("show", "tartine", "--json"),),
    ),
    Case(("set", "commit", "{data}/tartine/mol.toml", "--json"), "set-commit-unchanged"),
    Case(
        ("set", "commit", "{data}/tartine2/mol.toml", "-m", "tartine v2", "--json"),
        "set-commit-second",
        then=(("diff", "tartine~1", "tartine", "--json"),),
    ),
    Case(
        ("set", "derive", "tartine", "--use", "router=router~1", "-m", "derived", "--json"),
        "set-derive",
        then=(("show", "tartine", "--json"),),
    ),
    Case(
        ("contract", "add", "{data}/review.toml", "--json"),
        "contract-add",
        then=(("contract", "show", "review", "--json"),),
    ),
    Case(
        ("contract", "add", "{data}/review2.toml", "--json"),
        "contract-add-version",
        then=(("contract", "ls", "--json"),),
    ),
    Case(("eval", "w-commit", "--contract", "review", "--metric", "acc=0.9", "--json"), "eval"),
    Case(("eval", "tartine", "--contract", "quality", "--json"), "eval-evaluator"),
    Case(
        ("eval", "w-commit", "--contract", "review", "--metric", "acc=high"),
        "eval-refused",
    ),
    Case(("gate", "w-commit", "--to", "review", "--json"), "gate-needs-approval"),
    Case(
        ("approve", "w-commit", "--channel", "review", "--json"),
        "approve",
        then=(("gate", "w-commit", "--to", "review", "--json"),),
    ),
    Case(("approve", "w-commit", "--channel", "review", "--json"), "approve-again"),
    Case(
        ("promote", "w-commit", "--to", "review", "--json"),
        "promote",
        then=(("history", "w-commit@review", "--json"), ("status", "--json")),
        known=ENTRY_IDS,
    ),
    Case(("promote", "w-commit~1", "--to", "review", "--json"), "promote-refused"),
    Case(
        ("promote", "w-commit~1", "--to", "review", "--force", "--reason", "why not", "--json"),
        "promote-force",
        known=ENTRY_IDS,
    ),
    Case(("promote", "w-commit", "--to", "reveiw", "--json"), "promote-did-you-mean"),
    Case(
        ("rollback", "w-commit@review", "--reason", "back", "--json"),
        "rollback",
        then=(("history", "w-commit@review", "--json"),),
        known=ENTRY_IDS,
    ),
    Case(
        ("channel", "rm", "w-commit@scratch", "--json"),
        "channel-rm",
        before=(("promote", "w-commit", "--to", "scratch", "--json"),),
        then=(("history", "w-commit@scratch", "--json"),),
        known=ENTRY_IDS,
    ),
    Case(("channel", "rm", "w-commit@review", "--json"), "channel-rm-refused"),
    Case(
        ("canary", "start", "tartine@production", "tartine", "--fraction", "0.25", "--json"),
        "canary-start",
        before=(("promote", "tartine~1", "--to", "production", "--json"),),
        then=(("canary", "status", "tartine@production", "--json"),),
        known=ENTRY_IDS,
    ),
    Case(
        ("canary", "start", "tartine@production", "tartine", "--json"),
        "canary-start-twice",
    ),
    Case(
        ("canary", "stop", "tartine@production", "--reason", "enough", "--json"),
        "canary-stop",
        then=(
            ("canary", "status", "tartine@production", "--json"),
            ("history", "tartine@production", "--json"),
        ),
        known=ENTRY_IDS,
    ),
    Case(("checkout", "tartine", "{work}/co-tartine", "--json"), "checkout-set"),
    Case(("checkout", "router@v1", "{work}/co-router", "--json"), "checkout-adapter"),
    Case(("checkout", "router", "{work}/co-router", "--json"), "checkout-not-empty"),
    Case(("export", "router", "{work}/ex-peft", "--json"), "export-peft"),
    Case(("export", "tartine", "{work}/ex-vllm", "--format", "vllm", "--json"), "export-vllm"),
    Case(
        ("traces", "feedback", "chatcmpl-both-1", "0.9", "--label", "coding", "--json"),
        "traces-feedback",
        then=(("traces", "ls", "--min-score", "0.5", "--json"),),
    ),
    Case(("traces", "feedback", "chatcmpl-none", "0.9", "--json"), "traces-feedback-unknown"),
    Case(
        ("traces", "export", "-o", "{work}/routing.jsonl", "--format", "router", "--json"),
        "traces-export",
        then=(lambda out: ("dataset", "show", out["id"], "--json"),),
    ),
    Case((*ROUTE_EVAL, "--contract", "quality", "--json"), "route-eval-recorded"),
    Case(
        ("improve", "macaron", "--contract", "quality", "--json"),
        "improve",
        then=(
            ("history", "macaron@staging", "--json"),
            ("canary", "status", "macaron@production", "--json"),
        ),
        known=ENTRY_IDS + LOOP_BY,
    ),
    # The registry's own objects: protected channels, tokens, webhooks (both sides hold the
    # same admin token, alice's, made before the history).
    Case(("registry", "protect", "guarded", "--role", "maintainer", "--json"), "protect"),
    Case(("registry", "protected", "--json"), "protected"),
    Case(("registry", "unprotect", "guarded", "--json"), "unprotect"),
    Case(
        ("registry", "token", "create", "bob", "--role", "reader", "--lines", "w-*", "--json"),
        "token-create",
        known=("$.token",),  # the secret: each side makes its own
        then=(("registry", "token", "ls", "--json"),),
    ),
    Case(("registry", "token", "create", "bob", "--role", "reader"), "token-create-taken"),
    Case(("registry", "token", "revoke", "bob", "--json"), "token-revoke"),
    Case(
        ("registry", "webhook", "add", "http://127.0.0.1:9/hook", "--json")
        + ("--secret-env", "MINT_WEBHOOK_SECRET", "--events", "channel.moved"),
        "webhook-add",
        then=(("registry", "webhook", "ls", "--json"),),
        known=ENTRY_IDS,
    ),
    Case(("registry", "webhook", "deliveries", "--json"), "webhook-deliveries"),
    Case(("registry", "webhook", "rm", "1", "--json"), "webhook-rm", known=ENTRY_IDS),
    Case(("registry", "webhook", "rm", "1", "--json"), "webhook-rm-again", known=ENTRY_IDS),
]


@pytest.fixture(scope="module")
def both(models, tmp_path_factory):
    """The two sides with one history, and the answers of every case, in the order of the
    lists (the tests compare them, in whatever order they run)."""
    root = tmp_path_factory.mktemp("both-ways")
    data = root / "data"
    write_inputs(data)
    values = {"BASE": models["base"], "A1": models["a1"], "A2": models["a2"]}
    values |= {"A3": models["a3"], "data": data}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MINT_USER", USER)
        env.setenv("XDG_CONFIG_HOME", str(root / "config"))
        env.setenv("XDG_CACHE_HOME", str(root / "cache"))
        env.setenv("MINT_WEBHOOK_SECRET", "s3cret")  # else `webhook add` warns, locally only
        for name in ("MINT_REPO", "MINT_DEBUG", "MINT_DB_URL", "MINT_TOKEN"):
            env.delenv(name, raising=False)
        for name in ("local", "registry"):
            api.init(root / name)[0].close()
            token = create_token(root / name, USER, "admin")
        env.setenv("MINT_TOKEN", token)  # the registry's
        registry = start_registry(root / "registry")
        try:
            sides = [
                Side("local", str(root / "local"), root / "work-local", values),
                Side("remote", registry.url, root / "work-remote", values),
            ]
            for side in sides:
                side.work.mkdir()
            b = Both(*sides)
            for case in SETUP:
                b.answers[case.id] = b.run_case(case)
                remote, local = b.answers[case.id][-1]
                assert remote.code == local.code == 0, (case.args, remote, local)
            _record_traces(b, token)
            b.learn_ids()
            for case in READS + WRITES:
                b.answers[case.id] = b.run_case(case)
            yield b
        finally:
            registry.stop()


def _record_traces(b: Both, token: str) -> None:
    """The same served turns on both sides, as the runtime's recorder writes them."""
    local = api.open_repo(b.local.repo)
    remote = RemoteRepo(b.remote.repo, token, cache=None)
    try:
        for repo in (remote, local):
            head = api.resolve(repo, "macaron")
            assert api.write_traces(repo, [r | {"set_commit": head} for r in trace_rows()]) == 3
    finally:
        local.close()
        remote.close()


# The commands that run where the repository is: against a registry, one line that says so.
LOCAL_ONLY: dict[str, tuple[str, ...]] = {
    "init": ("init", "{work}/new"),
    "fsck": ("fsck",),
    "gc": ("gc", "--dry-run"),
    "db upgrade": ("db", "upgrade"),
    "registry serve": ("registry", "serve", "--port", "0"),  # serves the repository it is in
}

# Commands not run both ways here, and why.
EXCLUDED: dict[str, str] = {
    # They move commits between a local repository and a registry, so they take both at once:
    # tests/test_remote.py runs them against real registries.
    "push": "moves commits from a local repository to a registry",
    "fetch": "moves commits from a registry to a local repository",
    "clone": "takes a registry's URL as its argument and makes a local repository",
    "remote add": "names a registry in this machine's config; no repository is read",
    "remote ls": "names a registry in this machine's config; no repository is read",
    "remote remove": "names a registry in this machine's config; no repository is read",
    "login": "keeps a token for a registry URL in this machine's config",
    "logout": "forgets a token kept for a registry URL in this machine's config",
    "config set": "a setting of this machine's user config (signing.key); no repository is read",
    "config get": "a setting of this machine's user config (signing.key); no repository is read",
    "config unset": "a setting of this machine's user config; no repository is read",
    "config ls": "the settings of this machine's user config; no repository is read",
    # Keys and signatures: tests/test_signing.py runs each locally and through a registry.
    "key generate": "makes a key pair in a folder of this machine; no repository is read",
    "key add": "tests/test_signing.py adds keys locally and on a registry (an admin's)",
    "key ls": "tests/test_signing.py lists keys locally and on a registry",
    "key rm": "tests/test_signing.py removes keys locally and on a registry",
    "verify": "tests/test_signing.py verifies commits locally and against a registry's keys",
    "key limit": "tests/test_signing_trust.py narrows a key's purposes on a registry",
    "signature prune": "tests/test_signing_trust.py prunes through a registry (an admin's)",
    # What serves: reports reach a registry, so tests/test_fleet.py and test_fleet_history.py
    # read them with `mint --repo URL` from real `mint serve` processes behind a balancer.
    "fleet show": "tests/test_fleet.py reads the instances that real servers reported",
    "fleet history": "tests/test_fleet.py reads the served history real servers made",
    # A merge loads the base and PEFT; tests/test_merge.py merges locally and reads the
    # result through a registry (its web page and the Hub's API).
    "merge": "tests/test_merge.py merges with PEFT over the base and reads it via a registry",
    # Proposals: tests/test_proposals.py makes, lists, shows, merges and closes them through
    # a registry (the Hub's API and `mint --repo URL`) and in a local repository.
    "proposal ls": "tests/test_proposals.py lists proposals through a registry",
    "proposal show": "tests/test_proposals.py shows a proposal through a registry",
    "proposal merge": "tests/test_proposals.py merges through a registry and locally",
    "proposal close": "tests/test_proposals.py closes through the Hub's API and the CLI",
    # A server that runs until stopped; tests/test_traces_remote.py serves from a registry.
    "serve": "a long-running server (tests/test_traces_remote.py runs it with --repo URL)",
}


# --- the tests -------------------------------------------------------------------------------


def _check(both: Both, case: Case, answers) -> None:
    """Compare each (remote, local) pair of ANSWERS, the case's known differences aside."""
    seen: set[str] = set()
    for remote, local in answers:
        seen |= both.compare(remote, local, case.known)
    assert seen or not case.known, f"the known differences are gone: remove {case.known}"


@pytest.mark.parametrize("case", [c.param() for c in SETUP])
def test_setup(both, case):
    _check(both, case, both.answers[case.id])


@pytest.mark.parametrize("case", [c.param() for c in READS])
def test_read(both, case):
    _check(both, case, both.answers[case.id])


@pytest.mark.parametrize("case", [c.param() for c in WRITES])
def test_write(both, case):
    _check(both, case, both.answers[case.id])


def test_pull(both, tmp_path_factory, models):
    """`mint pull hf://ORG/REPO` from a real Hub (olah serving a git repository)."""
    server = HubServer(tmp_path_factory.mktemp("hub"))
    server.repo("org/ad").commit({"": models["a1"], "README.md": "# ad\n"}, "first")
    server.start("org/ad")
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("HF_ENDPOINT", server.endpoint)
            for name in ("HF_HUB_OFFLINE", "HF_TOKEN", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
                env.delenv(name, raising=False)
            env.setenv("HF_HOME", str(both.remote.work / "hf"))  # each side its own HF cache
            remote = both.remote.run(PULL)
            # if the registry refuses, the local repository is left as it is
            assert remote.code == 0, f"the registry refused: {remote.err.strip()}"
            # the registry finds the hub commit it holds (GET /pulled), by repo, sha and folder
            [item] = remote.json()["pulled"]
            registry = RemoteRepo(both.remote.repo, os.environ["MINT_TOKEN"], cache=None)
            try:
                held = registry.backend.pulled("org/ad", item["sha"])
                assert (held.id, held.line) == (item["id"], "w-pulled")
                assert registry.backend.pulled("org/ad", item["sha"], "a-folder") is None
                assert registry.backend.pulled("org/other", item["sha"]) is None
            finally:
                registry.close()
            env.setenv("HF_HOME", str(both.local.work / "hf"))
            local = both.local.run(PULL)
    finally:
        server.stop()
    both.learn_ids()  # the pulled commits are new on both sides: pair them
    both.compare(remote, local)


PULL = ("pull", "hf://org/ad", "--as", "w-pulled", "--tag", "hub", "--json")


@pytest.mark.parametrize("name", list(LOCAL_ONLY))
def test_local_only_commands_say_so_in_one_line(both, name):
    r = both.remote.run(LOCAL_ONLY[name])
    assert r.code == 1 and not r.out, r
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "runs only where the repository is" in lines[0], r
    assert not (both.remote.work / "new").exists()  # `init` made no repository here


_ANY_ANSWER = {"id": "0" * 64}  # what a `then` function is given to name its command


def _commands(group: click.Group = cli, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name))


def _command_of(args: tuple[str, ...]) -> str:
    """The command path an argument list runs: ("contract", "show", "x") -> "contract show"."""
    command, words = cli, []
    for word in args:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
        words.append(word)
    return " ".join(words)


def test_every_command_is_run_both_ways_or_excluded():
    cases = SETUP + READS + WRITES
    run = {_command_of(c.args) for c in cases} | {_command_of(PULL)}
    run |= {_command_of(a(_ANY_ANSWER) if callable(a) else a) for c in WRITES for a in c.then}
    everything = set(_commands())
    assert run <= everything
    assert set(LOCAL_ONLY) <= everything and set(EXCLUDED) <= everything
    assert not run & set(LOCAL_ONLY) and not run & set(EXCLUDED)
    forgotten = everything - run - set(LOCAL_ONLY) - set(EXCLUDED)
    assert not forgotten, f"run these both ways here, or exclude them with a reason: {forgotten}"
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids)  # the answers are kept by case id
