#!/usr/bin/env python
"""A plain GET while 300 stalled connections are held open: a real `mint registry serve`.

Figures (issue 19, item 8: "a normal request keeps p95 < 250 ms while 300 stalled sockets
are open"): p50 and p95 of RUNS requests of `GET /api/v1/lines` (a reader's token; the
database is read) measured by the client, on one kept-alive connection and on a new
connection each, first with nothing else open, then while STALLED sockets are held open:
half send a request head and never finish it (no blank line), half send a whole blob
upload's head (a writer's token, Content-Length 1 MiB) and 4 KiB of its body, then stop.
The ratio is p95 with them over p95 without.

The server runs with `--request-timeout TIMEOUT`, longer than the timed phase, so that every
stalled socket is still open while it is measured; afterwards the script waits for the
server to close them and reports how many it closed and when (it should be all of them, a
little after TIMEOUT). `--plain-serve` starts the server without that option (to measure a
build that lacks it: its stalled sockets are not expected to close).

    python bench/bench_slow_clients.py [--stalled 300] [--runs 150] [--timeout 60]
"""

from __future__ import annotations

import argparse
import contextlib
import select
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_catalog  # noqa: E402

import _common as c  # noqa: E402

TARGET_MS = 250.0
UPLOAD_BYTES = 1 << 20
SENT_BODY = 4096
PATH = "/api/v1/lines"


def stalled_sockets(port: int, n: int, writer: str) -> list[socket.socket]:
    """N connections to 127.0.0.1:PORT, each holding an unfinished request: the first half
    an unfinished head, the second half an upload that stops after SENT_BODY bytes."""
    blob = "ab" * 32
    upload = (
        f"PUT /api/v1/blobs/{blob} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {writer}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {UPLOAD_BYTES}\r\n\r\n"
    ).encode() + b"x" * SENT_BODY
    head = f"GET {PATH} HTTP/1.1\r\nHost: bench\r\nX-Slow: ".encode()
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(head if i < n // 2 else upload)
        socks.append(s)
    return socks


def closed_by_server(socks: list[socket.socket], wait: float) -> list[float]:
    """Seconds (from now) at which the server closed each socket, within WAIT seconds (0:
    those closed already); sockets still open then are left out (and are looked at again by
    the next call). Bounded: one select per 0.2 s at most."""
    t0, open_, closed = time.monotonic(), {s for s in socks if s.fileno() != -1}, []
    while open_:
        ready, _, _ = select.select(list(open_), [], [], min(0.2, wait))
        for s in ready:
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:  # EOF (or reset): the server closed it
                closed.append(time.monotonic() - t0)
                open_.discard(s)
                s.close()
        if time.monotonic() - t0 >= wait:
            break
    return closed


def timed_gets(url: str, reader: str, runs: int) -> dict[str, list[float]]:
    """Milliseconds per GET: on one kept-alive connection, and on a new connection each."""
    import httpx

    headers = {"Authorization": f"Bearer {reader}"}
    times: dict[str, list[float]] = {"kept-alive connection": [], "new connection each": []}
    no_keep = httpx.Limits(max_keepalive_connections=0)  # each request connects anew
    with (
        httpx.Client(base_url=url, headers=headers, timeout=60) as kept,
        httpx.Client(base_url=url, headers=headers, timeout=60, limits=no_keep) as fresh,
    ):
        kept.get(PATH)  # warm up
        for _ in range(runs):
            for kind, client in (("kept-alive connection", kept), ("new connection each", fresh)):
                t0 = time.perf_counter()
                answer = client.get(PATH)
                times[kind].append((time.perf_counter() - t0) * 1000)
                assert answer.status_code == 200, answer.text[:300]
    return times


def run(stalled: int, runs: int, timeout: float, plain: bool) -> dict:
    from mint import api

    from support.registry import start_registry

    results: dict = {"stalled": stalled, "runs": runs, "timeout_s": timeout, "plain": plain}
    with contextlib.ExitStack() as stack:
        repo, _ = stack.enter_context(c.temp_repo("sqlite", "mint-bench-slow"))
        reader = api.token_create(repo, "bench-reader", "reader", by="bench").token
        writer = api.token_create(repo, "bench-writer", "writer", by="bench").token
        args = () if plain else ("--request-timeout", f"{timeout:g}")
        server = start_registry(repo.root, args=args)
        stack.callback(server.stop)
        port = int(server.url.rsplit(":", 1)[1])
        results["without"] = timed_gets(server.url, reader, runs)
        socks = stalled_sockets(port, stalled, writer)
        stack.callback(lambda: [s.close() for s in socks])
        opened = time.monotonic()
        time.sleep(1.0)  # let the server accept them all and start the uploads
        results["with"] = timed_gets(server.url, reader, runs)
        results["measured_within_s"] = time.monotonic() - opened
        # Were they all still held while timed? (Any the server closed by now are counted.)
        results["open_while_timed"] = stalled - len(closed_by_server(socks, 0.0))
        started = time.monotonic() - opened
        closed = closed_by_server(socks, max(timeout + 15.0 - started, 5.0))
        results["closed"] = stalled - results["open_while_timed"] + len(closed)
        results["last_closed_s"] = started + max(closed) if closed else None
    return results


def report(r: dict) -> str:
    rows = []
    for kind in r["without"]:
        before, after = r["without"][kind], r["with"][kind]
        p95_before, p95_after = bench_catalog.pct(before, 0.95), bench_catalog.pct(after, 0.95)
        rows.append(
            [
                kind,
                bench_catalog.pct(before, 0.5),
                p95_before,
                bench_catalog.pct(after, 0.5),
                p95_after,
                f"{p95_after / p95_before:.2f}x",
                c.verdict(p95_after, TARGET_MS),
            ]
        )
    title = (
        f"GET {PATH} while {r['stalled']} stalled sockets are open (ms, {r['runs']} requests each)"
    )
    header = ["connection", "p50 alone", "p95 alone", "p50 stalled", "p95 stalled", "ratio", ""]
    text = c.table(title, header, rows)
    last = r["last_closed_s"]
    closed = f"{r['closed']} of {r['stalled']} stalled sockets closed by the server"
    closed += f", the last {last:.1f} s after they stalled" if last is not None else ""
    setting = "no --request-timeout" if r["plain"] else f"--request-timeout {r['timeout_s']:g}"
    held = f"{r['open_while_timed']} of {r['stalled']} still open when the timing ended"
    return f"{text}\n\n{closed} ({setting}; {held}, {r['measured_within_s']:.1f} s after)"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--stalled", type=int, default=300, help="stalled sockets held open")
    p.add_argument("--runs", type=int, default=150, help="timed requests of each kind")
    p.add_argument("--timeout", type=float, default=60.0, help="the server's --request-timeout")
    p.add_argument("--plain-serve", action="store_true", help="serve without the new options")
    args = p.parse_args(argv)
    results = run(args.stalled, args.runs, args.timeout, args.plain_serve)
    print(report(results))
    path = c.write_json("bench_slow_clients", results)
    print(f"\n(JSON: {path})")
    return results


if __name__ == "__main__":
    main()
