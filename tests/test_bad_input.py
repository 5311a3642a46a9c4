"""Bad input: one line on stderr, a non-zero exit, no traceback, and nothing stored."""

import json
import struct

import pytest

from conftest import one_line_error, refused

pytestmark = pytest.mark.one_database(
    "sqlite",
    "the input is refused before any statement; test_integrity and test_crash write on both"
    " databases",
)


@pytest.fixture
def based(mint, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    assert mint("commit", "chat", models["a1"], "-m", "good").code == 0
    return mint


def weights(folder):
    return folder / "adapter_model.safetensors"


def test_missing_config(based, repo, adapter):
    (adapter / "adapter_config.json").unlink()
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "no adapter_config.json")


def test_not_a_folder(based, repo, tmp_path):
    refused(based, repo, ["commit", "chat", tmp_path / "nope", "-m", "x"], "not a folder")


def test_config_not_json(based, repo, adapter):
    (adapter / "adapter_config.json").write_text("{not json")
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "not valid JSON")


def test_unknown_peft_type(based, repo, adapter):
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["peft_type"] = "MYSTERY"
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "unsupported peft_type")


def test_header_length_past_end(based, repo, adapter):
    data = bytearray(weights(adapter).read_bytes())
    data[:8] = struct.pack("<Q", len(data) * 10)
    weights(adapter).write_bytes(bytes(data))
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "header length")


def test_truncated_safetensors(based, repo, adapter):
    data = weights(adapter).read_bytes()
    weights(adapter).write_bytes(data[:-100])
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "corrupt safetensors")


def test_offsets_past_the_end(based, repo, adapter):
    data = weights(adapter).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin + 10**9, end + 10**9]
    raw = json.dumps(header).encode()
    weights(adapter).write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "corrupt safetensors")


def test_garbage_header(based, repo, adapter):
    weights(adapter).write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{[" + b"\0" * 64)
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "not JSON")


def test_pickle_is_refused_with_a_hint(based, repo, adapter):
    weights(adapter).unlink()
    (adapter / "adapter_model.bin").write_bytes(b"\x80\x04\x95pickled")
    line = one_line_error(based("commit", "chat", adapter, "-m", "x"), "pickle")
    assert "safetensors" in line  # says how to convert


def test_r_does_not_match_shapes(based, repo, adapter):
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["r"] = 16
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "does not agree with r=16")


def test_tensor_outside_target_modules(based, repo, adapter):
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["target_modules"] = ["q_proj"]
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "target_modules")


def test_unregistered_base(based, repo, adapter):
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "Qwen/Qwen2-7B"
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    line = one_line_error(based("commit", "chat", adapter, "-m", "x"), "not a registered base")
    assert "mint base add" in line
    refused(
        based, repo, ["commit", "chat", adapter, "-m", "x", "--base", "nope"], "not registered"
    )


def test_base_that_does_not_fit(based, repo, adapter, tmp_path):
    other = tmp_path / "wide"
    other.mkdir()
    (other / "config.json").write_text(
        json.dumps({"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2})
    )
    assert based("base", "add", "wide", other).code == 0
    refused(
        based,
        repo,
        ["commit", "chat", adapter, "-m", "x", "--base", "wide"],
        "has 128 input features",
    )


@pytest.mark.parametrize(
    "name",
    ["a/b/c", "/a", "a/", "..", "a..b", "has space", "tab\there", "nul\x01", "@x", "_lead", ""],
)
def test_hostile_line_names(based, repo, models, name):
    refused(based, repo, ["commit", name, models["a2"], "-m", "x"], "invalid line name")


@pytest.mark.parametrize("name", ["v/1", "../v1", "v 1", "v\n1", "v1.lock"])
def test_hostile_tag_names(based, repo, name):
    refused(based, repo, ["tag", name, "chat"], "invalid tag name")


def test_symlink_in_adapter(based, repo, adapter):
    (adapter / "escape").symlink_to("/etc/passwd")
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "symbolic link")


def test_checkout_into_non_empty_folder(based, repo, tmp_path):
    dest = tmp_path / "full"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    one_line_error(based("checkout", "chat", dest), "not an empty folder")
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]


def test_unknown_and_malformed_revisions(based, repo, tmp_path):
    for rev in ("ghost", "chat@", "@v1", "chat~x", "deadbeef00"):
        refused(based, repo, ["show", rev], "revision")


def test_hostile_path_in_stored_commit_is_not_written(based, repo, tmp_path):
    """A tampered database row with '../' in a path cannot make checkout write outside DEST."""
    from mint import schema

    with repo.db.write() as conn:
        conn.execute(
            schema.files.update()
            .where(schema.files.c.path == "README.md")
            .values(path="../escaped.md")
        )
    dest = tmp_path / "co"
    one_line_error(based("checkout", "chat", dest), "unsafe file path")
    assert not (tmp_path / "escaped.md").exists() and not dest.exists()


def test_no_repository(tmp_path, monkeypatch):
    from mint.cli import run_in_process

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINT_REPO", raising=False)
    code, _, err = run_in_process(["log"])
    assert code == 1 and "mint init" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("value", ["lots", "2GiB", "-1", ""])
def test_a_registry_refuses_a_check_before_that_is_not_a_size_before_it_starts(
    mint, repo, monkeypatch, value
):
    """MINT_REGISTRY_CHECK_BEFORE is read when a blob is sent; a value that is not a number of
    bytes is refused at `registry serve`, in one line, not answered 500 on every large send."""
    monkeypatch.setenv("MINT_REGISTRY_CHECK_BEFORE", value)
    line = one_line_error(mint("registry", "serve", "--port", "0"), "MINT_REGISTRY_CHECK_BEFORE")
    assert repr(value) in line


@pytest.mark.parametrize("value", ["-1", "soon", ""])
def test_serve_refuses_a_retry_after_that_is_not_seconds(mint, repo, value):
    """`mint serve --retry-after` takes seconds, 0 or more: anything else is one line before
    anything is loaded."""
    one_line_error(mint("serve", "macaron", "--retry-after", value), "--retry-after", code=2)
