"""mint's vLLM plugin without vLLM: names to verified folders (`mint.vllm.adapters`) and the
following of names that move (`mint.vllm.follow`), on a real repository and a real registry.

The resolver itself, inside a real vLLM server, is tested by `make test-vllm` (tests_vllm/).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from mint import api
from mint.errors import BaseMismatch, InvalidConfig, InvalidName, MintError, RevisionNotFound
from mint.store.errors import BlobCorrupt
from mint.vllm.adapters import AdapterSource, matches, split_name
from mint.vllm.follow import Follower

from conftest import one_line_error
from support.registry import create_token, running_registry

pytestmark = pytest.mark.one_database(
    "sqlite",
    "names resolve to folders through functions test_commit and test_history run on both"
    " databases",
)


USER = "tester"


@pytest.fixture
def chat(repo, models):
    """A repository with two commits of `chat`, a tag on the first and `production` on it."""
    api.base_add(repo, "tiny", models["base"])
    first = api.commit(repo, "chat", models["a1"], "one", author=USER, base="tiny").id
    second = api.commit(repo, "chat", models["a2"], "two", author=USER, base="tiny").id
    api.tag(repo, "v1", first, by=USER)
    api.promote(repo, first, "production", by=USER)
    return first, second


def digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def test_a_tag_a_channel_and_a_prefix_give_the_commit_named_by_content(
    repo, models, chat, tmp_path
):
    first, second = chat
    source = AdapterSource(repo, tmp_path / "cache")
    by_tag = source.fetch(str(models["base"]), "chat@v1")
    by_channel = source.fetch(str(models["base"]), "chat@production")
    by_prefix = source.fetch(str(models["base"]), f"chat@{second[:10]}")
    assert (by_tag.name, by_channel.name) == (f"chat@{first}",) * 2
    assert by_prefix.name == f"chat@{second}"
    assert (by_tag.moves, by_channel.moves, by_prefix.moves) == (True, True, False)
    assert Path(by_tag.path) == tmp_path / "cache" / first
    assert matches(Path(by_prefix.path), api.show(repo, second))
    theirs = {"adapter_config.json", "adapter_model.safetensors"}
    assert theirs <= set(digests(Path(by_tag.path)))
    assert split_name("chat") is None and split_name("@x") is None


def test_a_corrupt_cache_is_checked_out_again_and_nothing_else_is_served(
    repo, models, chat, tmp_path
):
    first, _ = chat
    source = AdapterSource(repo, tmp_path / "cache")
    folder = Path(source.fetch(str(models["base"]), "chat@v1").path)
    good = digests(folder)
    weights = folder / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert not matches(folder, api.show(repo, first))
    again = Path(source.fetch(str(models["base"]), "chat@v1").path)
    assert again == folder and digests(again) == good


def test_a_corrupt_blob_is_refused_and_nothing_is_cached(repo, models, chat, tmp_path):
    first, _ = chat
    blob = api.show(repo, first).files["adapter_model.safetensors"].sha256
    path = repo.store.local_path(blob)
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    source = AdapterSource(repo, tmp_path / "cache")
    with pytest.raises(BlobCorrupt):
        source.fetch(str(models["base"]), "chat@v1")
    assert list((tmp_path / "cache").iterdir()) == []


def test_another_base_and_unknown_names_are_refused(repo, models, chat, tmp_path):
    from mint.examples.tiny import build_base

    other = build_base(tmp_path / "other", hidden=32, heads=2)
    source = AdapterSource(repo, tmp_path / "cache")
    with pytest.raises(BaseMismatch) as caught:
        source.fetch(str(other), "chat@v1")
    assert "tiny" in str(caught.value) and str(other) in str(caught.value)
    with pytest.raises(RevisionNotFound):
        source.fetch(str(models["base"]), "chat@nope")
    with pytest.raises(RevisionNotFound):
        source.fetch(str(models["base"]), "nosuch@production")
    with pytest.raises(InvalidName) as caught:  # a name vLLM hands over that is not LINE@REV
        source.fetch(str(models["base"]), "chat")
    assert "\n" not in str(caught.value) and "not LINE@REV" in str(caught.value)
    api.commit(repo, "other", models["a3"], "x", author=USER, base="tiny")
    with pytest.raises(RevisionNotFound):  # a commit of chat is not one of other's
        source.fetch(str(models["base"]), f"other@{chat[0][:10]}")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_moved_channel_is_reported_once_with_both_commits(repo, models, chat, tmp_path):
    first, second = chat
    source = AdapterSource(repo, tmp_path / "cache")
    moves: list[tuple[str, str, str]] = []
    follower = Follower(source.commit_of, lambda *move: moves.append(move), interval=3600)
    follower.watch("chat@production", "chat", "production", first)
    assert follower.check() == [] and moves == []
    api.promote(repo, second, "production", by=USER)
    assert follower.check() == ["chat@production"]
    assert moves == [("chat@production", first, second)]
    assert follower.check() == [] and follower.watched() == {}


def test_a_token_that_may_not_read_the_line_gets_nothing(repo, models, chat, tmp_path):
    from mint.remote.repo import RemoteRepo

    token = create_token(repo.root, "outsider", "reader", ("other*",))
    with running_registry(repo.root) as registry:
        remote = RemoteRepo(registry.url, token, cache=tmp_path / "blobs")
        source = AdapterSource(remote, tmp_path / "cache")
        with pytest.raises(MintError) as caught:
            source.fetch(str(models["base"]), "chat@production")
        assert isinstance(caught.value, (PermissionError, LookupError))
        admin = create_token(repo.root, "admin", "admin")
        allowed = AdapterSource(
            RemoteRepo(registry.url, admin, cache=tmp_path / "b2"), tmp_path / "c2"
        )
        got = allowed.fetch(str(models["base"]), "chat@production")
    assert list((tmp_path / "cache").iterdir()) == []
    assert got.name == f"chat@{chat[0]}"
    config = json.loads((Path(got.path) / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA"


def test_without_vllm_the_engine_says_what_to_install(mint, chat):
    import importlib.util

    # make test's environment never has vLLM (it lives in its own, for make test-vllm)
    assert importlib.util.find_spec("vllm") is None, "vLLM is installed in make test's .venv"
    result = mint("serve", "chat@production", "--engine", "vllm", "--port", "0")
    line = one_line_error(result, "pip install 'mint-lora[vllm]'")
    assert "--engine-url" in line
    one_line_error(mint("serve", "chat@production", "--engine-url", "http://127.0.0.1:9"))
    one_line_error(mint("route-eval", "chat@production", "--data", __file__, "--engine", "vllm"))


def test_an_engine_url_with_no_vllm_behind_it_is_one_line(mint, chat, models):
    from support import free_port

    url = f"http://127.0.0.1:{free_port()}"
    args = ("--engine", "vllm", "--engine-url", url, "--base-dir", models["base"])
    result = mint("serve", "chat@production", "--port", str(free_port()), *args)
    assert url in one_line_error(result, "no vLLM server answers")


def test_without_mint_repo_the_source_says_what_to_set(tmp_path):
    with pytest.raises(InvalidConfig) as caught:
        AdapterSource.from_env({"MINT_VLLM_CACHE": str(tmp_path / "cache")})
    assert "\n" not in str(caught.value) and "MINT_REPO is not set" in str(caught.value)
