#!/usr/bin/env python
"""The cost of a signed move (issue 23): `promote --sign` against a plain promote, in-process.

Figures (min, median and max over the runs; the ratio is of the medians, both sides measured
in one run, alternating which goes first):
  * promote: a plain promote of an unprotected channel (the one check signed moves add: a
    lookup of the channel in protected_channels by primary key)
  * promote --sign: the same move signed with a P-256 key (statement, ECDSA signature, the
    check against the move and the trusted key, one more insert), on a channel protected
    as signed
  * history --verify of the signed channel's moves, per move

    python bench/bench_signed_moves.py [--runs 7] [--db sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402


def measure(repo, tmp: Path, runs: int) -> dict:
    from mint import api
    from mint.examples import tiny
    from mint.signing.keys import key_generate

    base = tiny.build_base(tmp / "base")
    model, _ = tiny.load_base(base)
    api.base_add(repo, "base", base)
    ids = [
        api.commit(
            repo,
            "chat",
            tiny.build_adapter(base, tmp / f"a{i}", seed=i, model=model),
            "v",
            author="b",
        ).id
        for i in (1, 2)
    ]
    key = key_generate(tmp / "key")
    api.key_add(repo, "alice", Path(key.public_key).read_text(), by="b")
    api.protect(repo, "signed", by="b", signed=True)
    out: dict = {"plain": [], "signed": []}
    for i in range(runs + 1):  # the first round warms up
        target = ids[i % 2]

        def plain() -> float:
            return c.timed(lambda: api.promote(repo, target, "plain", by="b"))[0]

        def signed() -> float:
            t = c.timed(lambda: api.promote(repo, target, "signed", by="b", sign=key.private_key))
            return t[0]

        order = (plain, signed) if i % 2 else (signed, plain)
        times = {fn.__name__: fn() for fn in order}
        if i:
            out["plain"].append(times["plain"])
            out["signed"].append(times["signed"])
    n = len(api.history(repo, "chat@signed"))
    verify = c.repeat(lambda: api.history_verify(repo, "chat@signed"), runs)
    out["verify_per_move"] = [t / n for t in verify]
    assert all(m.state == "valid" for m in api.history_verify(repo, "chat@signed"))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--db", default="sqlite,postgresql")
    args = parser.parse_args(argv)
    dbs = [d for d in args.db.split(",") if d != "postgresql" or c.pg_available()]
    rows, results = [], {}
    for db in dbs:
        with c.temp_repo(db, "bench-signed-moves") as (repo, tmp):
            r = measure(repo, tmp, args.runs)
        results[db] = r
        ratio = c.median(r["signed"]) / c.median(r["plain"])
        for label, key, shown in (
            ("promote", "plain", ""),
            ("promote --sign", "signed", f"{ratio:.2f}x"),
            ("history --verify, per move", "verify_per_move", ""),
        ):
            ms = [t * 1000 for t in r[key]]
            rows.append(
                [f"{db}: {label}", *(f"{v:.1f}" for v in (min(ms), c.median(ms), max(ms))), shown]
            )
    print(c.table("signed moves (ms)", ["", "min", "median", "max", "ratio"], rows))
    c.write_json("signed_moves", {"runs": args.runs, "results": results, "env": c.environment()})


if __name__ == "__main__":
    main()
