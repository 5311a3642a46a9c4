"""The steps of the loop demo (`mint.examples.loop`): train and version round 0, let users
talk to the server, learn from their traces, improve through the gate and a canary, measure.

Every repository step runs the real `mint` command in-process (`Demo.mint`) and shows what
it printed; only training runs as plain Python, as a user's training script would.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mint.examples.demo import MOL, Demo, Server, say
from mint.examples.loop_users import (
    FAMILIES,
    Tally,
    Users,
    read_jsonl,
    requests_of,
    trained_records,
    write_data,
)
from mint.ids import utcnow

SET = "macaron"
PRODUCTION = f"{SET}@production"
CONTRACT = "staging"  # the contract of the channel candidates reach first
CANARY = 0.2
MIN_TRACES = 20  # canary traces with feedback before the loop decides
TRAFFIC = 80  # requests in each round's phase of plain production traffic
ROUTER = dict(steps=200, batch_size=32)  # a few seconds on one core
# The users' phrasing families in each round: B is in use from the start, C from round 1.
ROUND_FAMILIES = ("AB", FAMILIES, FAMILIES)
# The bad candidate's data: every label moved to the next (an export joined on the wrong key).
SHIFTED = {"chat": "agent", "agent": "coding", "coding": "ui", "ui": "chat"}

CONTRACT_TOML = f"""name = "{CONTRACT}"
channel = "staging"
[[metric]]
name = "route_accuracy"
min = 0.45
max_regression = 0.02
[live]
min_score = 0.3
max_drop = 0.05
min_traces = {MIN_TRACES}
confidence = 0.9
"""


@dataclass
class Round:
    """One round's figures, as the summary reports them."""

    round: int
    router: str
    set: str
    trained_on: int
    dataset: str | None
    families: str = ""
    accuracy: float = 0.0
    live_score: float = 0.0
    live_traces: int = 0


@dataclass
class Loop:
    """The run's state: the CLI runner, trained files, the server and users, the figures."""

    d: Demo
    base: Path | None = None
    model: Any = None
    data: Any = None
    server: Server | None = None
    users: Users | None = None
    trained_on: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    rounds: list[Round] = field(default_factory=list)
    exports: list[dict] = field(default_factory=list)
    improves: list[dict] = field(default_factory=list)
    bad: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def json(self, *args: str, show: bool = False, check: bool = True) -> Any:
        """`mint ARGS --json`, parsed (None when it exited non-zero and check is off)."""
        code, out = self.d.mint(*args, "--json", show=show, check=check)
        return json.loads(out) if code == 0 else None


# --- round 0 -----------------------------------------------------------------


def title(loop: Loop, text: str) -> None:
    """A section title with the seconds since the run began."""
    say(f"{text}  [{time.perf_counter() - loop.started:.0f} s]")


def bootstrap(loop: Loop) -> None:
    """Train the base's adapters, version them, and gate the first set into production."""
    import torch

    from mint.examples.tiny import build_base, load_base
    from mint.examples.train import train_experts, write_prompts

    title(
        loop, "1. Round 0: train a router on a small seed set (phrasing family A), and 4 experts"
    )
    torch.set_num_threads(1)  # on two cores, one thread trains these tiny models fastest
    t = time.perf_counter()
    out = loop.d.work / "train"
    loop.base = build_base(out / "tiny-llama")
    loop.model, _ = load_base(loop.base)
    loop.data = write_data(out / "data")
    router = train_router(loop, out / "router-0", read_jsonl(loop.data.seed))
    experts = train_experts(
        loop.base, out, requests_of(160, FAMILIES, seed=4), model=loop.model, steps=40
    )
    write_prompts(out)
    print(f"  trained in {time.perf_counter() - t:.0f} s")
    version(loop, router, experts, out)


def train_router(loop: Loop, out: Path, records: list[dict]) -> Path:
    from mint.examples.train import TrainSettings
    from mint.examples.train import train_router as train

    settings = TrainSettings(**ROUTER)
    return train(loop.base, out, records, model=loop.model, settings=settings)


def version(loop: Loop, router: Path, experts: dict[str, Path], out: Path) -> None:
    d = loop.d
    title(loop, "2. Version them, commit the set, gate it into production")
    d.mint("init", d.repo)
    d.mint("base", "add", "tiny-llama", loop.base)
    n_seed = len(read_jsonl(loop.data.seed))
    d.mint("commit", "router", router, "-m", f"router v0: {n_seed} seed requests (family A)")
    loop.trained_on[commit_of(loop, "router")] = (n_seed, None)
    for label, folder in experts.items():
        d.mint("commit", label, folder, "-m", f"{label} specialist", show=False)
        d.mint("tag", "v1", label, show=False)
    setdir = d.work / SET
    setdir.mkdir()
    for name in ("route.md", "summary.md"):
        (setdir / name).write_bytes((out / name).read_bytes())
    (setdir / "mol.toml").write_text(MOL.format(router="router"))
    d.mint("set", "commit", setdir / "mol.toml", "-m", "macaron with router v0")
    (d.work / "staging.toml").write_text(CONTRACT_TOML)
    print("\n$ cat staging.toml\n" + "".join(f"  {line}\n" for line in CONTRACT_TOML.splitlines()))
    d.mint("contract", "add", d.work / "staging.toml")
    gate_data = loop.data.gate
    d.mint("route-eval", SET, "--data", gate_data, "--contract", CONTRACT, lines=3)
    d.mint("promote", SET, "--to", "staging")
    d.mint("promote", SET, "--to", "production")


def commit_of(loop: Loop, rev: str) -> str:
    return loop.json("show", rev)["id"]


# --- serving and measuring ---------------------------------------------------


def traffic(loop: Loop, number: int) -> tuple[Tally, str]:
    """A phase of plain traffic on production: requests in this round's phrasing families,
    each with feedback. Returns what the users saw and when the phase began."""
    families = ROUND_FAMILIES[number]
    title(
        loop,
        f"Round {number}: {TRAFFIC} user requests (phrasings {'+'.join(families)}) with feedback",
    )
    since = utcnow().isoformat()
    tally = loop.users.phase(TRAFFIC, families, seed=100 + number, show=4 if number == 0 else 0)
    served = ", ".join(f"{k[:12]}: {v}" for k, v in tally.by_set.items())
    print(f"  routed right {tally.right}/{tally.requests} (served by {served})")
    if number == 0:
        loop.d.mint("traces", "ls", "-n", "3")
    return tally, since


def measure(loop: Loop, number: int, phase: tuple[Tally, str]) -> None:
    """Production's routing accuracy on the fixed held-out set, and its live score: the mean
    feedback recorded on its traces of the phase."""
    tally, since = phase
    set_id = commit_of(loop, PRODUCTION)
    router = router_of(loop, set_id)
    r = loop.d.mint("route-eval", PRODUCTION, "--data", loop.data.heldout, lines=1)[1]
    accuracy = float(r.split("route accuracy of ")[1].split(": ")[1].split()[0])
    live = loop.json("traces", "ls", "--set", set_id, "--since", since, "-n", "100000")
    scores = [t["score"] for t in live if t["score"] is not None]
    n, dataset = loop.trained_on.get(router, (0, None))
    result = Round(number, router, set_id, n, dataset, ROUND_FAMILIES[number])
    result.accuracy = round(accuracy, 4)
    result.live_score = round(sum(scores) / len(scores), 4) if scores else 0.0
    result.live_traces = len(scores)
    loop.rounds.append(result)
    print(
        f"  ROUND {number}: production {set_id[:12]} (router {router[:12]}):"
        f" held-out route accuracy {result.accuracy:.3f},"
        f" live score {result.live_score:.3f} over {result.live_traces} scored traces"
    )


def router_of(loop: Loop, set_id: str) -> str:
    """The router commit a set commit pins."""
    return loop.json("show", set_id)["config"]["router"]["adapter"]


# --- one round of improvement ------------------------------------------------


def improve_round(loop: Loop, number: int) -> None:
    """Export what users taught, train the next router on it, and let `mint improve` take it
    through the gate, a canary and into production; in round 2 a bad candidate comes first."""
    title(
        loop, f"Round {number}: learn from deployment: export the traces, train router v{number}"
    )
    dataset = export(loop, number)
    records = trained_records(loop.data.seed, [Path(dataset["path"])])
    if number == 2:
        bad_candidate(loop, number, records, dataset)
    folder = train_router(loop, loop.d.work / "train" / f"router-{number}", records)
    message = f"router v{number}: seed + {dataset['records']} traces with feedback"
    commit_router(loop, folder, message, dataset, len(records))
    loop.d.mint("show", "router", lines=8)
    loop.d.mint("candidates", PRODUCTION, "--line", "router")
    title(
        loop, f"Round {number}: mint improve evaluates the candidate, stages it, starts a canary"
    )
    expect(improve(loop, number), "canary-started")
    for _ in range(3):  # more traffic while the loop waits for enough traces
        canary_traffic(loop, number)
        title(loop, f"Round {number}: mint improve judges the canary on live feedback")
        result = improve(loop, number)
        if result["outcome"] != "waiting":
            break
    expect(result, "promoted")
    loop.server.wait_for(loop.d.mint("show", PRODUCTION, "--json", show=False)[1], 30)


def export(loop: Loop, number: int) -> dict:
    """Every trace so far as routing examples (labels from feedback), kept as a dataset."""
    path = loop.d.work / f"traces-round{number}.jsonl"
    loop.d.mint("traces", "export", "--format", "router", "-o", path)
    dataset = {"round": number, **dataset_of(loop, path), "path": str(path)}
    loop.exports.append({k: dataset[k] for k in ("round", "id", "records")})
    return dataset


def dataset_of(loop: Loop, path: Path) -> dict:
    """The dataset recorded for the file at PATH (its sha256 names it)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return loop.json("dataset", "show", digest)


def commit_router(loop: Loop, folder: Path, message: str, dataset: dict, n: int) -> str:
    meta = f"data={dataset['id']}"
    loop.d.mint("commit", "router", folder, "-m", message, "--meta", meta)
    router = commit_of(loop, "router")
    loop.trained_on[router] = (n, dataset["id"])
    return router


def improve(loop: Loop, number: int) -> dict:
    """One `mint improve` round (shown as printed), and its result as JSON."""
    args = ["improve", SET, "--contract", CONTRACT, "--line", "router"]
    args += ["--canary", str(CANARY), "--min-traces", str(MIN_TRACES)]
    args += ["--eval-data", str(loop.data.gate)]
    print("\n$ mint " + " ".join(a.replace(str(loop.d.work) + "/", "") for a in args))
    result = loop.json(*args)
    print(f"  round on {result['line']} under {result['contract']}: {result['outcome']}")
    for step in result["steps"]:
        where = f" {step['channel']}" if step["channel"] else ""
        print(f"    {step['action']}{where} {(step['commit'] or '-')[:12]}: {step['detail']}")
    loop.improves.append({"round": number, **result})
    return result


def expect(result: dict, outcome: str) -> None:
    if result["outcome"] != outcome:
        raise SystemExit(f"demo-loop: mint improve ended {result['outcome']}, not {outcome}")


def canary_traffic(loop: Loop, number: int) -> None:
    """Users keep coming while the canary serves its share of them (sticky per user), until
    the live numbers decide it (enough scored traces, users, and an interval of the
    difference that clears the contract's -max_drop, or lies under it)."""
    families = ROUND_FAMILIES[number]
    title(
        loop,
        f"Round {number}: the canary serves {CANARY:.0%} of users; traffic until it has enough",
    )
    tally = loop.users.phase(
        MIN_TRACES * 4, families, seed=200 + number, until=lambda: canary_ready(loop)
    )
    served = ", ".join(f"{k[:12]}: {v}" for k, v in tally.by_set.items())
    print(f"  {tally.requests} requests (served by {served})")
    loop.d.mint("canary", "status", PRODUCTION, "--contract", CONTRACT)


def canary_ready(loop: Loop) -> bool:
    """Whether the live numbers decide the canary yet (what `mint improve` would do)."""
    st = loop.json("canary", "status", PRODUCTION, "--contract", CONTRACT)
    return st["verdict"] is not None and st["verdict"]["action"] != "wait"


def bad_candidate(loop: Loop, number: int, records: list[dict], dataset: dict) -> None:
    """A router trained on mislabelled data is committed first: the gate must refuse it."""
    from mint.examples.train import mislabel

    title(
        loop, f"Round {number}: a bad candidate first: a router trained on labels shifted by one"
    )
    folder = train_router(loop, loop.d.work / "train" / "router-bad", mislabel(records, SHIFTED))
    message = "router retrained on an export joined on the wrong key"
    router = commit_router(loop, folder, message, dataset, len(records))
    result = improve(loop, number)
    refused = [s for s in result["steps"] if s["action"] == "refuse"]
    fate = "refused" if result["outcome"] == "refused" and refused else result["outcome"]
    loop.bad = {"router": router, "set": refused[0]["commit"] if refused else None, "fate": fate}
    loop.bad["why"] = refused[0]["detail"] if refused else None
    print(f"  the bad candidate was {fate}")


# --- the end -----------------------------------------------------------------


def report(loop: Loop) -> None:
    """The rounds' figures as a table, and production's history."""
    title(loop, "The rounds: production's routing accuracy (fixed held-out set) and live score")
    print(f"  {'round':>5}  {'router':<12}  {'trained on':>10}  {'held-out acc':>12}  live score")
    for r in loop.rounds:
        print(
            f"  {r.round:>5}  {r.router[:12]:<12}  {r.trained_on:>10}  {r.accuracy:>12.3f}"
            f"  {r.live_score:.3f} ({r.live_traces} traces, phrasings {'+'.join(r.families)})"
        )
    print(f"  bad candidate (router {loop.bad['router'][:12]}): {loop.bad['fate']}")
    title(loop, "The history of production")
    loop.d.mint("history", PRODUCTION, lines=40)
    loop.history = loop.json("history", PRODUCTION)
