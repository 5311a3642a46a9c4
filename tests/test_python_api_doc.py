"""docs/python-api.md's examples run as written, in order, in one namespace.

They start in an empty folder with mint's virtual environment first on the PATH (a contract's
evaluator runs `python`) and build their own tiny models. Before the first example that names
`http://registry:8080`, a real `mint registry serve` (`support.registry`) starts over the
repository the examples made, and that example reaches it there, with a maintainer's token in
MINT_TOKEN, as the page says.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path

import pytest

from support.registry import create_token, running_registry

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"
REGISTRY_URL = "http://registry:8080"
EXAMPLE = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)


def examples(markdown: str) -> list[str]:
    return EXAMPLE.findall(markdown)


def run_examples(blocks: list[str], monkeypatch) -> dict:
    """Run BLOCKS in one namespace; a failing one raises with its text."""
    namespace: dict = {"__name__": "python_api_doc"}
    with contextlib.ExitStack() as servers:
        for number, block in enumerate(blocks, 1):
            if REGISTRY_URL in block:
                token = create_token("play", "max", "maintainer")
                monkeypatch.setenv("MINT_TOKEN", token)
                url = servers.enter_context(running_registry(Path("play").resolve())).url
                block = block.replace(REGISTRY_URL, url)
            try:
                exec(compile(block, f"{DOC.name} example {number}", "exec"), namespace)
            except BaseException as error:
                raise AssertionError(f"example {number} failed:\n{block}") from error
    return namespace


def test_every_example_runs_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    blocks = examples(DOC.read_text())
    assert len(blocks) >= 12
    namespace = run_examples(blocks, monkeypatch)
    from mint import api

    repo = api.open_repo(tmp_path / "play")
    try:
        # what the examples left: the line's channels and the registry's commit by the token
        assert api.resolve(repo, "chat@production") == namespace["second"].id
        assert api.show(repo, "coding").author == "max"
        assert api.resolve(repo, "macaron@staging") == namespace["macaron"].id
    finally:
        repo.close()


def test_every_function_the_page_documents_is_in_mint_api():
    from mint import api

    headings = re.findall(r"^### (.+)$", DOC.read_text(), re.M)
    names = {n for h in headings for n in re.findall(r"`(\w+)`", h)}
    assert len(names) >= 15
    assert names <= set(api.__all__), names - set(api.__all__)


def test_an_example_that_fails_fails_the_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = examples(DOC.read_text())
    swapped = [blocks[0], blocks[3], blocks[2]]  # a commit before its base is registered
    with pytest.raises(AssertionError, match="example 2 failed") as failed:
        run_examples(swapped, monkeypatch)
    assert "api.commit" in str(failed.value)
