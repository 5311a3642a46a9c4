#!/usr/bin/env python
"""The screenshots of the registry's pages in docs/img: channel.png, evaluations.png and
commit.png, taken in Debian's headless Chromium (`make browser`) from a real
`mint registry serve` over a small repository made here.

The repository: tiny models built on the CPU (nothing is downloaded); the line `support-bot`
with eight commits by two authors, the newest with a README.md model card; two contracts
(`quality` guards production: accuracy and latency; `smoke` guards staging); seven commits
evaluated under both; staging and production moved by promotions, one rollback with its
reason, and an approval. The pages are opened signed in as a maintainer token
`release-owner`.

    .venv/bin/python docs/img/screenshots.py [--out docs/img]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from support.browser import chromium, sign_in, wait_for  # noqa: E402
from support.registry import create_token, start_registry  # noqa: E402

LINE = "support-bot"
WIDTH, MAX_HEIGHT = 1280, 2000  # the commit page: its facts, then its model card
QUALITY = """
name = "quality"
channel = "production"
requires = ["staging"]
[[metric]]
name = "accuracy"
min = 0.7
[[metric]]
name = "latency_ms"
max = 250
"""
SMOKE = """
name = "smoke"
channel = "staging"
[[metric]]
name = "accuracy"
min = 0.5
"""
# (message, author, accuracy, latency_ms); the eighth commit is not evaluated yet.
COMMITS = [
    ("first LoRA on the support transcripts (r=8, 300 steps)", "alice", 0.64, 210),
    ("more data: the billing tickets of March", "alice", 0.71, 215),
    ("lr 2e-4, 600 steps", "bob", 0.76, 220),
    ("rank 16 on q, k, v, o", "bob", 0.79, 262),
    ("back to rank 8, longer warm-up", "alice", 0.81, 205),
    ("dedupe the training set, drop the canned answers", "alice", 0.74, 200),
    ("refund policy examples, tone fixes", "bob", 0.84, 198),
    ("weekend run: 2 epochs on the new export", "alice", None, None),
]
CARD = """---
license: apache-2.0
base_model: tiny-llama
tags: [lora, support]
---
# support-bot

A LoRA adapter that answers customer-support questions about orders, billing and refunds,
in the company's tone.

## Training

- data: support transcripts, Jan–Mar, deduplicated (41,200 turns)
- rank 8 on `q_proj`, `k_proj`, `v_proj`, `o_proj`
- 600 steps at lr 2e-4, warm-up 60

## Evaluation

Held-out tickets of April: accuracy **0.84**, p95 latency 198 ms (contract `quality` v1).

## Limits

- It does not know prices: it links to the price page instead.
- Escalate legal questions to a person.
"""


def build(folder: Path) -> tuple[Path, dict]:
    """The repository and what the pages show: commit ids by position."""
    from mint import api
    from mint.examples import tiny

    base = tiny.build_base(folder / "tiny-llama")
    model, _ = tiny.load_base(base)
    adapter = tiny.build_adapter(base, folder / "adapter", seed=1, model=model)
    repo, _ = api.init(folder / "repo")
    api.base_add(repo, "tiny-llama", base)
    for name, text in (("quality", QUALITY), ("smoke", SMOKE)):
        (folder / f"{name}.toml").write_text(text)
        api.contract_add(repo, folder / f"{name}.toml", by="admin")
    ids = []
    for i, (message, author, accuracy, latency) in enumerate(COMMITS):
        config = json.loads((adapter / "adapter_config.json").read_text())
        (adapter / "adapter_config.json").write_text(json.dumps({**config, "revision": f"r{i}"}))
        if i >= 6:
            (adapter / "README.md").write_text(CARD)
        ids.append(api.commit(repo, LINE, adapter, message, author=author).id)
        if accuracy is not None:
            metrics = {"accuracy": accuracy, "latency_ms": latency}
            api.record_evaluation(repo, ids[-1], "quality", metrics, source="manual", by="eval-ci")
            api.record_evaluation(
                repo, ids[-1], "smoke", {"accuracy": accuracy}, source="manual", by="eval-ci"
            )
    moves(repo, ids)
    repo.close()
    return folder / "repo", {"ids": ids}


def moves(repo, ids: list[str]) -> None:
    """Staging and production over the commits, with reasons, a rollback and an approval."""
    from mint import api

    for i, (who, reason) in {
        2: ("alice", "first to pass smoke"),
        4: ("bob", "rank 8 is back under the latency bound"),
    }.items():
        api.promote(repo, ids[i], "staging", by=who, reason=reason)
        api.promote(repo, ids[i], "production", by=who, reason=reason)
    api.promote(repo, ids[5], "staging", by="alice", reason="dedupe run")
    api.promote(repo, ids[5], "production", by="alice", reason="cleaner answers in review")
    api.rollback(
        repo, f"{LINE}@production", by="bob", reason="accuracy 0.74 in production: canned tone"
    )
    api.promote(repo, ids[6], "staging", by="bob", reason="refund examples")
    api.approve(repo, ids[6], "production", by="carol")
    api.promote(repo, ids[6], "production", by="carol", reason="0.84 accuracy, 198 ms p95")


def shoot(browser, url: str, out: Path, wait_id: str) -> None:
    """Open URL, wait for the element WAIT_ID, and save the page (its full height, at most
    MAX_HEIGHT) to OUT."""
    browser.set_window_size(WIDTH, 900)
    browser.get(url)
    wait_for(browser, lambda: browser.find_element("id", wait_id))
    height = browser.find_element("tag name", "body").size["height"]
    browser.set_window_size(WIDTH, min(max(height + 140, 700), MAX_HEIGHT))
    browser.save_screenshot(str(out))
    print(f"{out} ({out.stat().st_size // 1024} KiB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="mint-screenshots-"))
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        root, built = build(folder)
        token = create_token(root, "release-owner", "maintainer")
        server = start_registry(root)
        stack.callback(server.stop)
        browser = chromium(folder / "chromium", size=f"{WIDTH},900")
        stack.callback(browser.quit)
        sign_in(browser, server.url, token)
        pages = {
            "channel.png": (f"/channel/{LINE}@production", "timeline"),
            "evaluations.png": (f"/evaluations/{LINE}@quality", "chart"),
            "commit.png": (f"/commit/{built['ids'][6]}", "card"),
        }
        for name, (path, wait_id) in pages.items():
            shoot(browser, server.url + path, args.out / name, wait_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
