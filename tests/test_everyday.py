"""What a team coming from MLflow's registry or the Hugging Face Hub expects every day
(issue 22, "Working with a registry"): a name that is not found says which known names are
nearest, the same locally and through a registry; `mint logout`; and `mint gc --dry-run`
says what the grace period keeps. Each through the real CLI."""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
import subprocess
import sys

import pytest

from mint import api
from mint import errors as e
from mint.cli import run_in_process
from mint.remote.config import save_token, token_for

from conftest import Result, one_line_error
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
    (["history", "chat@stagin"], "did you mean chat@staging?"),
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


# --- login and logout ---------------------------------------------------------------------


def tokens_file(tmp_path):
    return tmp_path / "config" / "mint" / "tokens.json"


@pytest.fixture
def registry(tmp_path, models, monkeypatch):
    """A registry on SQLite with a reader's token, and a config folder of this test's own."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MINT_TOKEN", raising=False)
    repo, _ = api.init(tmp_path / "registry")
    api.base_add(repo, "tiny-llama", models["base"])
    api.commit(repo, "chat", models["a1"], "one", author="tester")
    token = create_token(repo.root, "rita", "reader")
    with running_registry(repo.root) as server:
        yield server, token
    repo.close()


def login(url: str, token: str, tmp_path) -> subprocess.CompletedProcess:
    """`echo TOKEN | mint login URL`, as a shell runs it (the token on standard input)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("MINT_TOKEN", None)
    argv = [sys.executable, "-m", "mint", "login", url]
    return subprocess.run(argv, input=token + "\n", env=env, capture_output=True, text=True)


def test_login_with_nothing_on_standard_input_says_what_it_expected(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    line = one_line_error(Result(*run_in_process(["login", "http://127.0.0.1:9"])), code=2)
    assert "expected a token on standard input" in line and "read nothing" in line
    assert not tokens_file(tmp_path).exists()
    for blank in ("", "   "):  # the library refuses it before asking the registry anything
        with pytest.raises(e.InvalidConfig, match="the token is empty"):
            api.login("http://127.0.0.1:9", blank, folder=tmp_path / "config" / "mint")


@pytest.mark.parametrize(
    "kept, used", [("127.0.0.1", "localhost"), ("localhost", "127.0.0.1")], ids=["ip", "name"]
)
def test_a_token_kept_for_one_loopback_name_answers_for_the_other(registry, tmp_path, kept, used):
    server, token = registry
    port = server.url.rsplit(":", 1)[1]
    done = login(f"http://{kept}:{port}", token, tmp_path)
    assert done.returncode == 0 and "as rita (reader)" in done.stdout, done.stderr
    other = f"http://{used}:{port}"
    r = Result(*run_in_process(["--repo", other, "log", "chat", "--json"]))
    assert r.code == 0 and r.json()[0]["message"] == "one", r

    r = Result(*run_in_process(["logout", other + "/"]))
    assert r.code == 0 and f"logged out of http://{kept}:{port}" in r.out, r
    assert json.loads(tokens_file(tmp_path).read_text()) == {}
    assert stat.S_IMODE(tokens_file(tmp_path).stat().st_mode) == 0o600
    one_line_error(Result(*run_in_process(["--repo", other, "log", "chat"])), "token")
    line = one_line_error(Result(*run_in_process(["logout", other])), "no token is kept")
    assert "kept: none" in line


def test_logout_without_a_url_forgets_origins_token_else_the_only_one(tmp_path, monkeypatch):
    config = tmp_path / "config" / "mint"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    a, b = "http://registry-a:8080", "http://registry-b:8080"
    save_token(config, a, "token-a")
    save_token(config, b, "token-b")

    line = one_line_error(Result(*run_in_process(["logout"])), "2 registries")
    assert a in line and b in line
    here, _ = api.init(tmp_path / "work")
    here.close()
    assert run_in_process(["--repo", str(here.root), "remote", "add", "origin", b])[0] == 0
    r = Result(*run_in_process(["--repo", str(here.root), "logout", "--json"]))
    assert r.code == 0 and r.json()["url"] == b, r
    assert json.loads((config / "tokens.json").read_text()) == {a: "token-a"}

    r = Result(*run_in_process(["logout"]))  # outside the repository: the only one kept
    assert r.code == 0 and r.out.startswith(f"logged out of {a};"), r
    one_line_error(Result(*run_in_process(["logout"])), "no registry's token is kept")


def test_logout_takes_a_remotes_name(tmp_path, monkeypatch):
    config = tmp_path / "config" / "mint"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    here, _ = api.init(tmp_path / "work")
    here.close()
    mint = ["--repo", str(here.root)]
    assert run_in_process([*mint, "remote", "add", "team", "http://localhost:8080/"])[0] == 0
    save_token(config, "http://127.0.0.1:8080", "t")
    save_token(config, "http://registry-a", "a")
    r = Result(*run_in_process([*mint, "logout", "team"]))
    assert r.code == 0 and "http://127.0.0.1:8080" in r.out, r
    assert (
        token_for("http://localhost:8080", {"XDG_CONFIG_HOME": str(tmp_path / "config")}) is None
    )
    one_line_error(Result(*run_in_process([*mint, "logout", "nope"])), "no remote named nope")


# --- gc -----------------------------------------------------------------------------------


def test_gc_dry_run_says_what_the_grace_period_keeps_and_until_when(mint, repo, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    assert mint("commit", "chat", models["a1"], "-m", "one").code == 0  # young, but referenced
    orphans = [repo.store.put_bytes(text).id for text in (b"nobody", b"refers to us")]
    youngest = max(repo.store.mtime(b) for b in orphans)
    until = dt.datetime.fromtimestamp(youngest + 3600, dt.UTC).replace(microsecond=0)

    plan = mint("gc", "--dry-run", "--json").json()
    assert plan["blobs"] == [] and not plan["executed"]
    assert (plan["graced"], plan["graced_bytes"]) == (2, 18)
    assert dt.datetime.fromisoformat(plan["graced_until"]) == until
    r = mint("gc", "--dry-run")
    assert r.code == 0, r
    assert r.out.splitlines() == [
        "would remove 0 blobs (0 bytes) and 0 stale temp files",
        f"kept by the grace period (3600 s): 2 unreferenced blobs (18 bytes), until "
        f"{until.isoformat()} at the latest",
    ]
    assert all(repo.store.has(b) for b in orphans)

    r = mint("gc", "--dry-run", "--grace", "0", "--json")  # nothing is young any more
    assert r.json()["blobs"] == sorted(orphans) and r.json()["graced"] == 0
    assert r.json()["graced_until"] is None
    assert mint("gc", "--grace", "0").out.splitlines() == [
        "removed 2 blobs (18 bytes) and 0 stale temp files"
    ]
