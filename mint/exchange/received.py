"""What a value that arrived from elsewhere (a push, a fetch) must be before it is used.

Every number is checked for its type and bounds before any int() or arithmetic: JSON gives
floats (`2.0`, `1e400` as infinity, NaN), strings and booleans where an integer was meant, and
integers of thousands of digits, none of which may reach a column or a computation. Each check
raises InvalidObject naming what was wrong, in one short line.
"""

from __future__ import annotations

import datetime as dt
import math
import re

from mint.errors import InvalidObject
from mint.ids import as_utc

MAX_COUNT = 2**62  # sizes, offsets, tensor dimensions: beyond any real file, inside BIGINT
MAX_INT = 2**63 - 1  # an integer inside a JSON value (meta, config): what BIGINT could keep
MAX_SHOWN = 40  # characters of a refused value quoted in a message
_HEX64 = re.compile(r"[0-9a-f]{64}")
# NUL, or half of a surrogate pair (a lone `\ud800` from JSON): no database column keeps it,
# UTF-8 cannot encode it, and a tokenizer chokes on it. A valid astral character (an emoji) is
# one code point in a str, so it never matches. The runtime and the registry use this too.
UNSTORABLE_TEXT = re.compile("[\x00\ud800-\udfff]")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)  # no time before it is any object's
CLOCK_SKEW = dt.timedelta(minutes=5)  # how far ahead of ours another machine's clock may be


def shown(value: object) -> str:
    """VALUE for a message: short, and never a repr that itself fails (a 5,000-digit int)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        return f"an integer of {len(str(value)) if value.bit_length() < 14_000 else 'many'} digits"
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit, nested in a list
        text = f"a {type(value).__name__}"
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def whole(value: object, what: str, *, low: int = 0, high: int = MAX_COUNT) -> int:
    """A JSON integer from LOW to HIGH: not a bool, a float (`2.0`) or a string (`"2"`)."""
    if type(value) is not int or not low <= value <= high:
        raise InvalidObject(f"{what} is {shown(value)}: a whole number from {low} to {high}")
    return value


def text(value: object, what: str, *, max_len: int, empty: bool = True) -> str:
    """A string of at most MAX_LEN characters (and not empty unless EMPTY)."""
    if not isinstance(value, str) or len(value) > max_len or (not empty and not value):
        limit = f"of 1 to {max_len}" if not empty else f"of at most {max_len}"
        raise InvalidObject(f"{what} is {shown(value)}: a string {limit} characters")
    if UNSTORABLE_TEXT.search(value):
        raise InvalidObject(f"{what} holds a NUL or a lone surrogate: not text")
    return value


def optional_text(value: object, what: str, *, max_len: int) -> str | None:
    return None if value is None else text(value, what, max_len=max_len)


def hex64(value: object, what: str) -> str:
    """A full object id: 64 lowercase hex digits."""
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise InvalidObject(f"{what} is {shown(value)}: an id of 64 hex digits")
    return value


def table(value: object, what: str, *, optional: bool = False) -> dict | None:
    """A JSON object whose every number is finite and bounded (see `json_value`)."""
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        raise InvalidObject(f"{what} is {shown(value)}: a JSON object")
    return json_value(value, what)


def listing(value: object, what: str) -> list:
    if not isinstance(value, list):
        raise InvalidObject(f"{what} is {shown(value)}: a JSON list")
    return value


def json_value(value, what: str):
    """VALUE if every number in it is finite and every integer fits 64 bits: NaN and infinity
    are not JSON (PostgreSQL refuses them, a reader chokes on them), and a huge integer cannot
    be read back by Python's json module."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack += v.values()
            stack += v.keys()
        elif isinstance(v, str):
            if UNSTORABLE_TEXT.search(v):
                raise InvalidObject(f"{what} holds a NUL or a lone surrogate: not text")
        elif isinstance(v, list):
            stack += v
        elif isinstance(v, float) and not math.isfinite(v):
            raise InvalidObject(f"{what} holds {v!r}: numbers must be finite")
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT:
            raise InvalidObject(f"{what} holds {shown(v)}: integers must fit 64 bits")
        elif not isinstance(v, (str, int, float, bool, type(None))):
            raise InvalidObject(f"{what} holds a {type(v).__name__}, not a JSON value")
    return value


def timestamp(value: object, what: str, *, not_after: dt.datetime | None = None) -> dt.datetime:
    """An ISO 8601 time (UTC when it names no zone), from 1970 on and no later than
    NOT_AFTER (far-off years overflow when a database converts them between zones)."""
    if not isinstance(value, str) or len(value) > 64:
        raise InvalidObject(f"{what} is {shown(value)}: an ISO 8601 time")
    try:
        at = as_utc(dt.datetime.fromisoformat(value))
        at.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise InvalidObject(f"{what} is {shown(value)}: an ISO 8601 time") from None
    if at < EPOCH:
        raise InvalidObject(f"{what} is {value}: before 1970")
    if not_after is not None and at > not_after:
        raise InvalidObject(f"{what} is {value}: in the future")
    return at
