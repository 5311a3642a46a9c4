#!/usr/bin/env python
"""One client's long prompts against everyone else's small chats, on a real `mint serve`.

Figure (issue 19, item 15): p50 and p95 latency of a small chat as a client sees it (HTTP
included), sent one after the other by one client, alone and while another client sends
900 KB prompts back to back (under the 1 MiB body limit). Target: p95 with the long prompts
within 1.5x of p95 alone. A long prompt is cut to the model's budget before it is tokenized
in full (`prompts.encode_tail`), so it costs a batch what any prompt that fills the model's
context costs: the control phase, beside 3 KB prompts (just enough to fill the tiny model's
512 positions), shows how much of what is left is the model's work, not the text's size.
That work no longer holds small chats back: the router runs a prompt once for all labels
(`router.score_batch`), and short turns run between the stages and decoding steps of a long
batch (`Scheduler.between`), so a small chat waits for one forward pass at most.

The demo's tiny MoL is committed to a new SQLite repository and served by the installed CLI
(`python -m mint --repo ROOT serve macaron@production`, torch on one thread, traces on as by
default). Both phases are measured in one run, alternating which goes first.

    python bench/bench_long_prompts.py [--rounds 3] [--chats 40] [--kb 900]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from test_runtime_isolation import GOOD, ServeProcess, build_repo, chat_body  # noqa: E402

import _common as c  # noqa: E402

TARGET_RATIO = 1.5


def small_chats(url: str, count: int) -> tuple[list[float], int]:
    """`count` small chats one after the other: (latency of each, failed requests)."""
    import httpx

    latencies, failed = [], 0
    with httpx.Client(base_url=url, timeout=300) as http:
        for _ in range(count):
            t0 = time.perf_counter()
            reply = http.post("/v1/chat/completions", json=chat_body())
            latencies.append(time.perf_counter() - t0)
            failed += reply.status_code != 200
    return latencies, failed


class LongPrompts:
    """A client sending prompts of `kb` KB back to back until stopped."""

    def __init__(self, url: str, kb: int):
        words = (kb * 1000 - len(GOOD)) // len("hello ")
        self.body = chat_body("hello " * words + GOOD)
        self.url, self.sent, self.failed = url, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import httpx

        with httpx.Client(base_url=self.url, timeout=300) as http:
            while not self._stop.is_set():
                reply = http.post("/v1/chat/completions", json=self.body)
                self.sent += 1
                self.failed += reply.status_code != 200

    def __enter__(self) -> LongPrompts:
        self._thread.start()
        time.sleep(1.0)  # let the first long prompts arrive before the chats are timed
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def percentile(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def measure(url: str, rounds: int, chats: int, kb: int) -> dict:
    """Small-chat latencies alone, beside prompts of 3 KB (enough to fill the tiny model's
    context: the same model work as any longer one) and beside prompts of `kb` KB; the
    phases' order turns round by round."""
    small_chats(url, 5)  # warm-up, not counted
    sizes = {"alone": 0, "full": 3, "long": kb}
    latencies: dict[str, list[float]] = {phase: [] for phase in sizes}
    failed, sent, sent_failed = 0, dict.fromkeys(sizes, 0), dict.fromkeys(sizes, 0)
    for r in range(rounds):
        phases = list(sizes)[r % 3 :] + list(sizes)[: r % 3]
        for phase in phases:
            if not sizes[phase]:
                lat, bad = small_chats(url, chats)
            else:
                with LongPrompts(url, sizes[phase]) as other:
                    lat, bad = small_chats(url, chats)
                sent[phase] += other.sent
                sent_failed[phase] += other.failed
            latencies[phase] += lat
            failed += bad
    out = {"rounds": rounds, "chats": chats, "kb": kb, "failed": failed}
    for phase, values in latencies.items():
        out[phase] = {"p50_s": percentile(values, 50), "p95_s": percentile(values, 95)}
        out[phase]["prompts_sent"], out[phase]["prompts_failed"] = sent[phase], sent_failed[phase]
    for p in ("p50", "p95"):
        out[f"{p}_ratio"] = out["long"][f"{p}_s"] / out["alone"][f"{p}_s"]
        out[f"{p}_ratio_full"] = out["long"][f"{p}_s"] / out["full"][f"{p}_s"]
    return out


def _ms(seconds: float) -> str:
    return c.fmt_num(seconds * 1000, " ms")


def report(results: dict) -> str:
    alone, full, long = results["alone"], results["full"], results["long"]
    ok = results["p95_ratio"] <= TARGET_RATIO
    failed = full["prompts_failed"] + long["prompts_failed"] + results["failed"]
    rows = [
        ["p50 of a small chat", _ms(long["p50_s"]), _ms(full["p50_s"]), _ms(alone["p50_s"]),
         f"{results['p50_ratio']:.2f}x", f"{results['p50_ratio_full']:.2f}x", "-", "-"],
        ["p95 of a small chat", _ms(long["p95_s"]), _ms(full["p95_s"]), _ms(alone["p95_s"]),
         f"{results['p95_ratio']:.2f}x", f"{results['p95_ratio_full']:.2f}x",
         f"<= {TARGET_RATIO}x", "ok" if ok else "MISS"],
        ["other client's prompts answered", str(long["prompts_sent"]),
         str(full["prompts_sent"]), "-", "-", "-", "-", "-"],
        ["requests failed (all phases)", str(failed), "-", "-", "-", "-", "0",
         "ok" if failed == 0 else "MISS"],
    ]  # fmt: skip
    header = [
        "figure",
        f"beside {results['kb']} KB prompts",
        "beside 3 KB",
        "alone",
        "vs alone",
        "vs 3 KB",
        "target",
        "",
    ]
    title = "Small chats beside one client's long prompts (mint serve, tiny MoL, CPU)"
    return c.table(title, header, rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--chats", type=int, default=40, help="small chats per phase and round")
    p.add_argument("--kb", type=int, default=900, help="size of each long prompt")
    args = p.parse_args(argv)
    import torch

    from mint.examples import train

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="mint-bench-long-") as tmp:
        root = Path(tmp)
        demo = train.build_demo(root / "demo")
        server = ServeProcess(build_repo(root, demo), demo.base, root)
        try:
            results = measure(server.url, args.rounds, args.chats, args.kb)
        finally:
            server.stop()
    print(report(results))
    c.write_json("bench_long_prompts", results)
    return results


if __name__ == "__main__":
    main()
