#!/usr/bin/env python
"""The registry's web pages at 10^4 commits on a line: each page timed over HTTP against a
real `mint registry serve` process, on SQLite and PostgreSQL.

Figures (issue 14, acceptance 4: "every page loads in under 200 ms at 10^4 commits on a
line"): p50 and p95 of RUNS requests of each page, signed in with a maintainer's session
cookie, measured by the client (connection kept alive; the server renders the whole page).

The catalog is bench_catalog's, loaded the same way (rows straight to the driver) at ten times
the line's size: 1,000 lines, `bench` holding 10^4 commits (every 10th tagged), 10^3 moves on
`bench@production` and 10^4 moves over the other channels; then bench_catalog's contracts,
evaluations and promotions. Two real tiny adapters are committed on top of `bench`, so that
the diff page computes real relative deltas from stored tensors.

Pages: lines (the first page, 50 of the 1,000, with tags and holders), a line (its newest
page, and a page 5,000 commits deep), a commit (`bench@release`: 448 tensor rows,
evaluations), the diff of the two real commits, and a channel (`bench@production`: the newest
moves with their evidence, and a page in the middle of its history). For scale on a shared
machine, the JSON API's `GET /api/v1/history?ref=bench@production&n=20` and `/healthz` are
timed alongside.

    python bench/bench_web.py [--commits 10000] [--db sqlite,postgresql] [--runs 30]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_catalog  # noqa: E402

import _common as c  # noqa: E402

TARGET_MS = 200.0
LINE = bench_catalog.LINE


def tiny_adapters(folder: Path) -> dict:
    """A tiny base and two adapters on it (the tests' models), built on the CPU."""
    from mint.examples import tiny

    base = tiny.build_base(folder / "tiny-llama")
    model, _ = tiny.load_base(base)
    return {
        "base": base,
        "a1": tiny.build_adapter(base, folder / "a1", seed=1, model=model),
        "a2": tiny.build_adapter(base, folder / "a2", seed=2, model=model),
    }


def prepare(repo, tmp: Path, commits: int, models: dict) -> dict:
    """The catalog, the gate's setup, two real commits on `bench`, and a maintainer's token."""
    from mint import api

    built = bench_catalog.populate(repo, commits * 10)
    bench_catalog.prepare_moves(repo, tmp)
    api.base_add(repo, "tiny-llama", models["base"])
    a = api.commit(repo, LINE, models["a1"], "real adapter one", author="bench").id
    b = api.commit(repo, LINE, models["a2"], "real adapter two", author="bench").id
    token = api.token_create(repo, "bench-web", "maintainer", by="bench").token
    history = api.history(repo, f"{LINE}@production")
    middle = history[len(history) // 2].id
    deep = api.log(repo, LINE, commits // 2 + 1)[-1].id
    built.update(
        line_commits=next(i.commits for i in api.ls(repo) if i.name == LINE),
        moves_on_channel=len(history),
    )
    pages = {
        "lines (50 of 1,000)": "/",
        "line, newest page": f"/line/{LINE}",
        "line, page 5,000 deep": f"/line/{LINE}?after={deep}",
        "commit (448 tensors)": f"/commit/{built['release']}",
        "diff (real tensors)": f"/diff?a={a}&b={b}",
        "channel, newest moves": f"/channel/{LINE}@production",
        "channel, middle page": f"/channel/{LINE}@production?before={middle}",
        "evaluations (release)": f"/evaluations/{LINE}@release",
        "(JSON) history -n 20": f"/api/v1/history?ref={LINE}@production&n=20",
        "(baseline) /healthz": "/healthz",
    }
    return {"built": built, "token": token, "pages": pages}


def check(client, pages: dict, built: dict) -> None:
    """Each page answers 200 with what it must show, once, before timing."""
    for name, path in pages.items():
        answer = client.get(path)
        assert answer.status_code == 200, (name, answer.status_code, answer.text[:300])
        if not name.startswith("("):
            assert "<html" in answer.text and "Not possible" not in answer.text, name
    assert built["release"] in client.get(pages["commit (448 tensors)"]).text


def measure(clients: dict, pages: dict, runs: int) -> dict:
    """Milliseconds per page, the databases' requests interleaved page by page."""
    times = {db: {name: [] for name in pages[db]} for db in clients}
    for _ in range(runs):
        for db, client in clients.items():
            for name, path in pages[db].items():
                t0 = time.perf_counter()
                answer = client.get(path)
                times[db][name].append((time.perf_counter() - t0) * 1000)
                assert answer.status_code == 200, (name, answer.status_code)
    return times


def run(commits: int, dbs: list[str], runs: int) -> dict:
    import httpx

    from support.registry import start_registry

    results: dict = {"commits": commits, "runs": runs, "target_ms": TARGET_MS, "builds": {}}
    with contextlib.ExitStack() as stack:
        models = tiny_adapters(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        clients, pages = {}, {}
        for db in dbs:
            repo, tmp = stack.enter_context(c.temp_repo(db, "mint-bench-web"))
            t0 = time.perf_counter()
            prepared = prepare(repo, tmp, commits, models)
            built = prepared["built"]
            print(
                f"  {db:>10}: {built['line_commits']:,} commits on {LINE}, "
                f"{built['moves_on_channel']:,} moves on {LINE}@production, "
                f"{built['lines']:,} lines (prepared in {time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
            server = start_registry(repo.root)
            stack.callback(server.stop)
            client = httpx.Client(
                base_url=server.url,
                cookies={"mint_session": prepared["token"]},  # the pages' session
                headers={"Authorization": f"Bearer {prepared['token']}"},  # the JSON API's
                timeout=120,
            )
            stack.callback(client.close)
            check(client, prepared["pages"], built)
            clients[db], pages[db] = client, prepared["pages"]
            results["builds"][db] = {k: v for k, v in built.items() if k != "release"}
        for client in clients.values():  # warm up: first requests load modules and caches
            for path in next(iter(pages.values())).values():
                client.get(path)
        results["times"] = measure(clients, pages, runs)
    return results


def report(r: dict) -> str:
    rows = []
    for db, pages in r["times"].items():
        for name, values in pages.items():
            p50, p95 = bench_catalog.pct(values, 0.5), bench_catalog.pct(values, 0.95)
            rows.append([db, name, p50, p95, TARGET_MS, c.verdict(p95, TARGET_MS)])
    title = f"Web pages at {r['commits']:,} commits on a line (ms per page, {r['runs']} requests)"
    return c.table(title, ["database", "page", "p50", "p95", "target", ""], rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--commits", type=int, default=10_000, help="commits on the timed line")
    p.add_argument("--db", default=None, help="sqlite,postgresql (default: both if reachable)")
    p.add_argument("--runs", type=int, default=30)
    args = p.parse_args(argv)
    dbs = args.db.split(",") if args.db else ["sqlite", "postgresql"]
    if "postgresql" in dbs and not c.pg_available():
        print("PostgreSQL is not reachable: measuring SQLite only", file=sys.stderr)
        dbs = [d for d in dbs if d != "postgresql"]
    results = run(args.commits, dbs, args.runs)
    print(report(results))
    path = c.write_json("bench_web", results)
    print(f"\n(JSON: {path})")
    return results


if __name__ == "__main__":
    main()
