"""Times as a person reads and writes them: shown in the local zone with its offset (as git
shows them), and given as a date, a date and time (local unless it names its zone) or an age
("2 days ago", "3h"), as git's --since and --until take them."""

from __future__ import annotations

import datetime as dt
import re

import click

_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
    "w": 7 * 86400,
    "week": 7 * 86400,
}
_AGE = re.compile(r"^(\d+)\s*([a-z]+?)s?(?:\s+ago)?$")
_WORDS = ("now", "today", "yesterday")


def shown(iso: str | None) -> str:
    """ISO (as the API returns times, in UTC) in the local zone: 2026-12-04 10:00:03 +0100."""
    if not iso:
        return "-"
    moment = dt.datetime.fromisoformat(iso)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %z")


def when(text: str, option: str, now: dt.datetime | None = None) -> str:
    """TEXT (given to OPTION) as a moment in ISO 8601 with its zone; a usage error if none.

    A date (2026-12-04: its midnight) or a date and time (2026-12-04 10:00, or with T) is
    local unless it names its zone (Z, +01:00); an age is "N UNIT[s] [ago]" or "NUNIT" with
    UNIT one of s, m(in), h(our), d(ay), w(eek); also now, today and yesterday (midnight)."""
    now = now or dt.datetime.now().astimezone()
    word = text.strip().lower()
    if word in _WORDS:
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        moment = {"now": now, "today": midnight, "yesterday": midnight - dt.timedelta(1)}[word]
        return moment.isoformat()
    age = _AGE.match(word)
    if age and age.group(2) in _UNITS:
        return (now - dt.timedelta(seconds=int(age.group(1)) * _UNITS[age.group(2)])).isoformat()
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace(" ", "T", 1))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is no time: give a date (2026-12-04), a date and time "
            "(2026-12-04 10:00, local unless it ends in Z or +01:00) or an age (2 days ago, 3h)",
            param_hint=option,
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # a time without a zone is the reader's local time
    return moment.isoformat()
