"""What a team coming from MLflow's registry or the Hugging Face Hub expects every day
(issue 22, "Working with a registry"): a name that is not found says which known names are
nearest, the same locally and through a registry; `mint logout`; and `mint gc --dry-run`
says what the grace period keeps. Each through the real CLI."""

from __future__ import annotations

import pytest

from mint import api
from mint.cli import run_in_process

from conftest import one_line_error
from support.registry import create_token, running_registry
from support.texts import RELEASE_ACCURACY

# --- did you mean -------------------------------------------------------------------------

# (command, what its one line's hint says); each names something a keystroke from a known one.
TYPOS = [
    (["show", "chat@prodution"], "did you mean chat@production?"),
    (["show", "chta@production"], "did you mean chat@production?"),
    (["show", "chta@prodution"], "did you mean chat@production?"),
    (["show", "chta"], "did you mean chat, chat2?"),
    (["show", "cht~1"], "did you mean chat~1, chat2~1?"),
    (["show", "production"], "did you mean chat@production?"),
    (["log", "chat@stagin"], "did you mean chat@staging?"),
    (["contract", "show", "relase"], "did you mean release?"),
    (["contract", "show", "release", "--version", "7"], "did you mean release v1?"),
]


@pytest.fixture
def known_names(repo, models, monkeypatch, tmp_path):
    """Lines chat (tag v1, channels production and staging) and chat2; contract release."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("MINT_USER", "tester")
    api.base_add(repo, "tiny-llama", models["base"])
    for line in ("chat", "chat2"):
        api.commit(repo, line, models["a1"], "one", author="tester")
    (tmp_path / "release.toml").write_text(RELEASE_ACCURACY)
    for argv in (
        ["tag", "v1", "chat"],
        ["promote", "chat", "--to", "production"],
        ["promote", "chat", "--to", "staging"],
        ["contract", "add", tmp_path / "release.toml"],
    ):
        code, _, err = run_in_process(["--repo", str(repo.root), *map(str, argv)])
        assert code == 0, err
    return repo


def test_an_unknown_name_lists_the_nearest_known_ones_here_and_through_a_registry(
    known_names, monkeypatch
):
    repo = known_names
    local = {tuple(argv): run_in_process(["--repo", str(repo.root), *argv]) for argv, _ in TYPOS}
    monkeypatch.setenv("MINT_TOKEN", create_token(repo.root, "rita", "reader"))
    with running_registry(repo.root) as registry:
        remote = {
            tuple(argv): run_in_process(["--repo", registry.url, *argv]) for argv, _ in TYPOS
        }
    for argv, hint in TYPOS:
        code, out, err = local[tuple(argv)]
        assert code != 0 and not out, (argv, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.rstrip().endswith(f"(hint: {hint})"), (argv, err)
        assert remote[tuple(argv)] == local[tuple(argv)], argv


def test_a_name_far_from_every_known_one_offers_none(known_names, mint):
    line = one_line_error(mint("show", "zebra@qqq"), "unknown line")
    assert "hint" not in line
    line = one_line_error(mint("show", "abc12"), "unknown revision")
    assert line.endswith("(hint: a commit prefix needs 7 or more hex digits)")
