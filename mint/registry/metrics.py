"""The registry's `/metrics` (Prometheus text), read from the database, so every replica
answers the same: live instances per line, channel and commit served (`holder` says whether
it is the channel's holder), stale instances, how long the fleet of each channel has been off
its holder, whether that is past the registry's `--fleet-diverged-after`, and the failed
stagings serving processes reported, by reason. docs/fleet.md has alert rules on them."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import sqlalchemy as sa

from mint import api
from mint import schema as s
from mint.ids import as_utc, utcnow
from mint.repo import Repo
from mint.team.tokens import Identity


def _escape(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**pairs: object) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs.items()) + "}"


def _header(name: str, text: str, kind: str) -> list[str]:
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]


def render(repo: Repo, who: Identity, diverged_after: float) -> str:
    """The metrics of the lines WHO may read (the failure counter is the registry's own)."""
    views = [v for v in api.fleet(repo) if who.may_touch(v.line)]
    now = utcnow()
    served: Counter = Counter()
    stale: Counter = Counter()
    off: dict[tuple[str, str], float] = {}
    for v in views:
        key = (v.line, v.ref)
        off[key] = 0.0
        for m in v.members:
            if m.state == "stale":
                stale[key] += 1
            if not m.live:
                continue
            served[(*key, m.commit or "", m.holder)] += 1
            if not m.holder and m.off_since:
                since = as_utc(dt.datetime.fromisoformat(m.off_since))
                off[key] = max(off[key], (now - since).total_seconds())
    lines = _header(
        "mint_fleet_instances", "Live instances following a name, by the commit served.", "gauge"
    )
    for (line, ref, commit, holder), n in sorted(served.items()):
        labels = _labels(line=line, channel=ref, commit=commit, holder=str(holder).lower())
        lines.append(f"mint_fleet_instances{labels} {n}")
    text = "Instances unseen for three report intervals."
    lines += _header("mint_fleet_stale_instances", text, "gauge")
    lines += [
        f"mint_fleet_stale_instances{_labels(line=k[0], channel=k[1])} {stale[k]}" for k in off
    ]
    lines += _off_lines(off, diverged_after)
    lines += _failure_lines(repo)
    return "\n".join(lines) + "\n"


def _off_lines(off: dict, diverged_after: float) -> list[str]:
    name = "mint_fleet_off_holder_seconds"
    lines = _header(name, "The longest a live instance has served another commit.", "gauge")
    lines += [f"{name}{_labels(line=k[0], channel=k[1])} {v:.3f}" for k, v in sorted(off.items())]
    name = "mint_fleet_diverged"
    text = f"1 when a live instance is off the holder for more than {diverged_after:g} s."
    lines += _header(name, text, "gauge")
    lines += [
        f"{name}{_labels(line=k[0], channel=k[1])} {int(v > diverged_after)}"
        for k, v in sorted(off.items())
    ]
    return lines


def _failure_lines(repo: Repo) -> list[str]:
    name = "mint_fleet_staging_failures_total"
    lines = _header(name, "Failed stagings serving processes reported, by reason.", "counter")
    f = s.fleet_failures.c
    with repo.db.read() as conn:
        rows = conn.execute(sa.select(f.kind, f.count).order_by(f.kind)).all()
    return lines + [f"{name}{_labels(reason=kind)} {count}" for kind, count in rows]
