"""A serving process's report, and the one constructor every report passes, whichever door it
comes through (`mint serve` on a local repository, a registry's `POST /api/v1/fleet/report`).

A report says who the process is (its instance name, engine, the fingerprint of the base it
serves, when it started, how often it reports) and, for each name it follows (`LINE@REV`):
the commit it serves now and since when, the canary split beside it, and its last failure to
stage a version with the one-line reason. `stopped` says goodbye (a graceful stop).
`report_from` checks every value and returns a `Report`; the commits it names are checked
against the repository when it is recorded (`records`).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any

from mint.errors import InvalidName, InvalidReport
from mint.ids import as_utc
from mint.refs import check_name

MAX_NAMES = 1000  # names one process follows (a vLLM server may follow many adapters)
MAX_REASON = 500  # characters of a failure's reason
MIN_INTERVAL, MAX_INTERVAL = 0.1, 3600.0  # seconds between reports
INSTANCE = re.compile(r"^[A-Za-z0-9._:@/\[\]\-]{1,200}$")  # host:port, [::1]:80, a pod name
ENGINE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,31}$")
KIND = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
REPORT_KEYS = {
    "instance",
    "engine",
    "base",
    "version",
    "interval",
    "started_at",
    "names",
    "dropped",
    "stopped",
}
NAME_KEYS = {"name", "commit", "since", "canary", "failure"}
CANARY_KEYS = {"commit", "fraction", "since"}
FAILURE_KEYS = {"commit", "at", "kind", "reason"}


@dataclass(frozen=True)
class Failure:
    commit: str | None
    at: dt.datetime
    kind: str
    reason: str


@dataclass(frozen=True)
class Following:
    """One name a process follows, and what it serves for it."""

    name: str  # LINE@REV as given to the process
    line: str
    ref: str  # the part after '@' ('' for the line's head)
    commit: str | None
    since: dt.datetime | None
    canary: str | None
    fraction: float | None
    canary_since: dt.datetime | None
    failure: Failure | None

    def commits(self) -> list[str]:
        """Every commit this entry names."""
        named = [self.commit, self.canary, self.failure.commit if self.failure else None]
        return [c for c in named if c]


@dataclass(frozen=True)
class Report:
    instance: str
    engine: str
    base: str | None
    version: str | None
    interval: float
    started_at: dt.datetime
    names: tuple[Following, ...]
    dropped: int
    stopped: bool


def report_from(raw: Any) -> Report:
    """RAW (JSON) as a Report, every value checked; InvalidReport (one line) otherwise."""
    raw = _table(raw, "the report", REPORT_KEYS)
    instance = _text(raw.get("instance"), "instance", INSTANCE)
    names = raw.get("names", [])
    if not isinstance(names, list) or len(names) > MAX_NAMES:
        raise InvalidReport(f"names must be a list of at most {MAX_NAMES} names")
    following = tuple(_following(i, item) for i, item in enumerate(names))
    seen = [f.name for f in following]
    if len(set(seen)) != len(seen):
        raise InvalidReport("a name appears twice in names")
    dropped = raw.get("dropped", 0)
    if not _whole(dropped) or not 0 <= dropped < 2**31:
        raise InvalidReport("dropped must be a whole number of reports, 0 or more")
    stopped = raw.get("stopped", False)
    if not isinstance(stopped, bool):
        raise InvalidReport("stopped must be true or false")
    return Report(
        instance,
        _text(raw.get("engine"), "engine", ENGINE),
        _optional(raw.get("base"), "base", HEX64),
        _optional(raw.get("version"), "version", re.compile(r"^[A-Za-z0-9.+_-]{1,64}$")),
        _interval(raw.get("interval")),
        _time(raw.get("started_at"), "started_at"),
        following,
        dropped,
        stopped,
    )


def _following(i: int, raw: Any) -> Following:
    where = f"names.{i}"
    raw = _table(raw, where, NAME_KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= 300:
        raise InvalidReport(f"{where}.name must be LINE@REV")
    line, _, ref = name.partition("@")
    try:
        check_name("line", line)
    except InvalidName as exc:
        raise InvalidReport(f"{where}.name: {exc.why}") from None
    if "@" in name and not re.fullmatch(r"[A-Za-z0-9._~^/-]{1,200}", ref):
        raise InvalidReport(f"{where}.name: {ref!r} is no revision of a line")
    commit = _optional(raw.get("commit"), f"{where}.commit", HEX64)
    since = _time(raw.get("since"), f"{where}.since") if raw.get("since") is not None else None
    if commit is not None and since is None:
        raise InvalidReport(f"{where}.since: when it began serving {commit[:12]} is required")
    canary, fraction, canary_since = _canary(raw.get("canary"), f"{where}.canary")
    failure = _failure(raw.get("failure"), f"{where}.failure")
    return Following(name, line, ref, commit, since, canary, fraction, canary_since, failure)


def _canary(raw: Any, where: str) -> tuple[str | None, float | None, dt.datetime | None]:
    if raw is None:
        return None, None, None
    raw = _table(raw, where, CANARY_KEYS)
    commit = _text(raw.get("commit"), f"{where}.commit", HEX64)
    fraction = raw.get("fraction")
    if not _number(fraction) or not 0 < fraction < 1:
        raise InvalidReport(f"{where}.fraction must lie strictly between 0 and 1")
    return commit, float(fraction), _time(raw.get("since"), f"{where}.since")


def _failure(raw: Any, where: str) -> Failure | None:
    if raw is None:
        return None
    raw = _table(raw, where, FAILURE_KEYS)
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidReport(f"{where}.reason must be a line of text")
    if len(reason) > MAX_REASON:
        raise InvalidReport(f"{where}.reason is over {MAX_REASON} characters")
    return Failure(
        _optional(raw.get("commit"), f"{where}.commit", HEX64),
        _time(raw.get("at"), f"{where}.at"),
        _text(raw.get("kind"), f"{where}.kind", KIND),
        one_line(reason),
    )


def one_line(text: str) -> str:
    """TEXT on one line: every run of whitespace (newlines too) as one space."""
    return " ".join(str(text).split())


def _table(raw: Any, where: str, keys: set[str]) -> dict:
    if not isinstance(raw, dict):
        raise InvalidReport(f"{where} must be an object")
    unknown = set(raw) - keys
    if unknown:
        raise InvalidReport(f"{where}: unknown key {sorted(map(str, unknown))[0]!r}")
    return raw


def _text(value: Any, where: str, pattern: re.Pattern) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise InvalidReport(f"{where} is missing or malformed")
    return value


def _optional(value: Any, where: str, pattern: re.Pattern) -> str | None:
    return None if value is None else _text(value, where, pattern)


def _time(value: Any, where: str) -> dt.datetime:
    if not isinstance(value, str) or len(value) > 40:
        raise InvalidReport(f"{where} must be an ISO 8601 time")
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidReport(f"{where} must be an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise InvalidReport(f"{where} must name its time zone")
    return as_utc(parsed.astimezone(dt.UTC))


def _interval(value: Any) -> float:
    if not _number(value) or not MIN_INTERVAL <= value <= MAX_INTERVAL:
        raise InvalidReport(f"interval must be from {MIN_INTERVAL:g} to {MAX_INTERVAL:g} seconds")
    return float(value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
