"""PEFT's module matching (target_modules, rank_pattern), with a bound on regular expressions.

PEFT treats a string `target_modules` as a regular expression that must match a module's whole
name, and a list as names that match a module's last parts. Python's `re` has no timeout, and
a crafted pattern such as "(a|a)*c" backtracks for minutes on a long name, so patterns from an
adapter are matched in a child process with a deadline; a plain name never needs one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from mint.errors import InvalidAdapter

MAX_PATTERN = 1024
DEADLINE_SECONDS = 5.0
_CHILD = (
    "import json, re, sys\n"
    "patterns, names = json.load(sys.stdin)\n"
    "json.dump([[n for n in names if re.fullmatch(p, n)] for p in patterns], sys.stdout)\n"
)


def fullmatches(root, patterns: list[str], names: list[str]) -> list[set[str]]:
    """For each pattern, the NAMES it matches whole; bounded in time and size."""
    for p in patterns:
        if not isinstance(p, str) or len(p) > MAX_PATTERN:
            raise InvalidAdapter(
                root, f"a module pattern is not a string of at most {MAX_PATTERN}"
            )
        try:
            re.compile(p)
        except re.error as exc:
            why = f"module pattern {p!r} is not a regular expression ({exc})"
            raise InvalidAdapter(root, why) from None
    if all(re.escape(p) == p for p in patterns):  # no metacharacter: plain names
        return [{n for n in names if n == p} for p in patterns]
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _CHILD],
            input=json.dumps([patterns, names]),
            capture_output=True,
            text=True,
            timeout=DEADLINE_SECONDS,
            check=True,
        )
    except subprocess.TimeoutExpired:
        raise InvalidAdapter(
            root,
            f"matching its module patterns took over {DEADLINE_SECONDS:g} s; "
            "simplify target_modules or rank_pattern",
        ) from None
    return [set(found) for found in json.loads(proc.stdout)]


def targeted(root, modules: list[str], targets) -> set[str]:
    """The MODULES that target_modules names, by PEFT's rules."""
    if targets == "all-linear":
        return set(modules)
    if isinstance(targets, str):
        return fullmatches(root, [targets], modules)[0]
    if isinstance(targets, list) and all(isinstance(t, str) for t in targets):
        return {m for m in modules if any(m == t or m.endswith("." + t) for t in targets)}
    raise InvalidAdapter(
        root, f"target_modules {targets!r} is neither a string nor a list of names"
    )


def ranks(root, modules: list[str], config: dict) -> dict[str, int]:
    """Each module's rank: the first rank_pattern key matching (PEFT: `(.*\\.)?KEY`), else r."""
    pattern = config.get("rank_pattern") or {}
    if not isinstance(pattern, dict):
        raise InvalidAdapter(root, "rank_pattern must be an object of pattern -> rank")
    keys = list(pattern)
    plain = [k for k in keys if re.escape(k) == k]
    hits = dict(zip(plain, [{m for m in modules if m == k or m.endswith("." + k)} for k in plain]))
    others = [k for k in keys if k not in hits]
    if others:
        hits |= dict(zip(others, fullmatches(root, [rf"(.*\.)?{k}" for k in others], modules)))
    matched = [hits[k] for k in keys]
    out = {}
    for m in modules:
        r = next((pattern[k] for k, found in zip(keys, matched) if m in found), config["r"])
        if not isinstance(r, int) or isinstance(r, bool) or r <= 0:
            raise InvalidAdapter(root, f"rank_pattern gives {m} a rank of {r!r}")
        out[m] = r
    return out
