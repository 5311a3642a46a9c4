"""Issue 9's holes, one test each: every one of these failed before its fix."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from mint import api

from conftest import one_line_error, refused, snapshot
from support.texts import PROD


@pytest.fixture
def based(mint, models):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    assert mint("commit", "chat", models["a1"], "-m", "good").code == 0
    return mint


def corrupt(repo, blob: str) -> None:
    path = repo.store.local_path(blob)
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def weights_blob(repo, rev: str = "chat") -> str:
    return api.show(repo, rev).files["adapter_model.safetensors"].sha256


# --- 3. checkout, export and diff verify what they read --------------------------------


def test_checkout_and_export_refuse_corrupt_blobs_and_leave_nothing(based, repo, tmp_path):
    blob = weights_blob(repo)
    corrupt(repo, blob)
    for args in (["checkout", "chat", tmp_path / "co"], ["export", "chat", tmp_path / "ex"]):
        line = one_line_error(based(*args), blob[:12])
        assert "fsck" in line
        assert not args[-1].exists()
    one_line_error(based("export", "chat", tmp_path / "vllm", "--format", "vllm"), blob[:12])


def test_diff_refuses_corrupt_blob(based, repo, models):
    based("commit", "chat", models["a2"], "-m", "second")
    blob = weights_blob(repo, "chat~1")
    corrupt(repo, blob)
    one_line_error(based("diff", "chat~1", "chat"), blob[:12])


def test_committing_the_good_bytes_again_repairs_a_corrupt_blob(based, repo, models):
    blob = weights_blob(repo)
    corrupt(repo, blob)
    assert not api.fsck(repo).ok
    assert based("commit", "again", models["a1"], "-m", "same bytes, other line").code == 0
    repo.store.verify(blob)
    assert api.fsck(repo).ok


# --- 7. no password in a readable file -------------------------------------------------


def test_database_password_is_not_stored_in_config(tmp_path):
    from support.pgdb import pg_database

    with pg_database() as url:
        secret_url = url.replace("postgres@", "postgres:s3cret-pw@")
        repo, _ = api.init(tmp_path / "r", secret_url)
        repo.close()
        config = (tmp_path / "r" / ".mint" / "config.json").read_text()
        assert "s3cret-pw" not in config and "postgres@" in config
        secret = tmp_path / "r" / ".mint" / "db-password"
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        reopened = api.open_repo(tmp_path / "r")
        assert "s3cret-pw" in reopened.db.url and "s3cret-pw" not in reopened.db.safe_url
        assert api.ls(reopened) == []
        reopened.close()


# --- 8. a crafted target_modules regex is bounded --------------------------------------


@pytest.mark.one_database(
    "sqlite",
    "it is refused before anything is stored; the other refusals here run on both databases",
)
def test_catastrophic_target_regex_is_refused_in_bounded_time(based, repo, adapter):
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["target_modules"] = "(.|.)*z"
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "simplify target_modules")


def test_a_plain_regex_target_still_matches(based, repo, adapter):
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    cfg["target_modules"] = r".*\.(q_proj|k_proj|v_proj|o_proj)"
    (adapter / "adapter_config.json").write_text(json.dumps(cfg))
    assert based("commit", "regex", adapter, "-m", "regex targets").code == 0


# --- 9. concurrent writers get idempotence, not SQL text ------------------------------


def parallel(repo, n: int, *args) -> list[subprocess.CompletedProcess]:
    cmd = [sys.executable, "-m", "mint", "--repo", str(repo.root), *map(str, args)]
    env = {**os.environ, "MINT_USER": "racer"}
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(n)
    ]
    return [subprocess.CompletedProcess(cmd, p.wait(), *p.communicate()) for p in procs]


def test_parallel_approve_contract_add_and_base_add(based, repo, models, tmp_path):
    contract = tmp_path / "c.toml"
    contract.write_text(PROD)
    results = parallel(repo, 8, "approve", "chat", "--channel", "production")
    results += parallel(repo, 6, "contract", "add", contract)
    results += parallel(repo, 4, "base", "add", "second", models["base"])
    for r in results:
        assert r.returncode == 0 and "internal error" not in r.stderr, r.stderr
    assert len(api.contract_ls(repo)) == 1 and api.contract_show(repo, "prod").version == 1
    assert [b.name for b in api.base_ls(repo)] == ["second", "tiny-llama"]
    assert api.gate(repo, "chat", "production").checks  # the approval table is readable


# --- 10. NaN and infinity, the same on both databases ----------------------------------


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400"])
def test_non_finite_metrics_are_refused(based, repo, tmp_path, value):
    contract = tmp_path / "c.toml"
    contract.write_text(PROD)
    assert based("contract", "add", contract).code == 0
    refused(
        based, repo, ["eval", "chat", "--contract", "prod", "--metric", f"acc={value}"], "finite"
    )
    assert not api.gate(repo, "chat", "production").ok


@pytest.mark.parametrize("bad", ["min = nan", "min = inf", "max = -inf", "max_regression = nan"])
def test_non_finite_contract_bounds_are_refused(based, repo, tmp_path, bad):
    contract = tmp_path / "c.toml"
    contract.write_text(PROD.replace("min = 0.5", bad))
    refused(based, repo, ["contract", "add", contract], "finite number")


@pytest.mark.parametrize("timeout", ["nan", "inf", "1e400", "-1", "0"])
def test_bad_evaluator_timeouts_are_refused(based, repo, tmp_path, timeout):
    contract = tmp_path / "c.toml"
    contract.write_text(PROD + f'[evaluator]\ncommand = ["true"]\ntimeout = {timeout}\n')
    refused(based, repo, ["contract", "add", contract], "evaluator.timeout")


# --- 11. smaller holes -------------------------------------------------------------------


def test_non_utf8_file_name_is_refused(based, repo, adapter):
    (adapter / os.fsdecode(b"notes-\xff.txt")).write_text("x")
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "not UTF-8")


def test_symlinked_folder_is_refused_like_a_symlinked_file(based, repo, adapter, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "extra.txt").write_text("x")
    (adapter / "more").symlink_to(tmp_path / "elsewhere")
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "symbolic link")


def test_lora_b_of_the_wrong_width_for_the_base_is_refused(based, repo, adapter):
    tensors = load_file(adapter / "adapter_model.safetensors")
    name = next(n for n in tensors if "q_proj.lora_B" in n)
    tensors[name] = np.zeros((tensors[name].shape[0] + 8, tensors[name].shape[1]), np.float32)
    save_file(tensors, adapter / "adapter_model.safetensors")
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "output features")


@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_non_finite_weights_are_refused(based, repo, adapter, poison):
    tensors = load_file(adapter / "adapter_model.safetensors")
    name = next(iter(tensors))
    tensors[name] = tensors[name].copy()
    tensors[name].flat[3] = poison
    save_file(tensors, adapter / "adapter_model.safetensors")
    refused(based, repo, ["commit", "chat", adapter, "-m", "x"], "NaN or infinite")


def test_show_escapes_terminal_sequences(based, repo, models):
    assert (
        based("commit", "chat", models["a2"], "-m", "m\x1b[2J", "--meta", "k=\x1b]0;pwn\x07").code
        == 0
    )
    out = based("show", "chat").out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b" in out
    assert based("show", "chat", "--json").json()["meta"]["k"] == "\x1b]0;pwn\x07"


def test_gc_refuses_a_negative_grace(based, repo):
    refused(based, repo, ["gc", "--grace", "-100"], "-100")


# --- 13. a newcomer's first hour ---------------------------------------------------------


def test_init_on_a_missing_postgres_database_says_so(tmp_path):
    from support.pgdb import PG_ADMIN_URL

    url = PG_ADMIN_URL.rsplit("/", 1)[0] + "/mint_no_such_database_here"
    from mint.cli import run_in_process

    code, _, err = run_in_process(["init", str(tmp_path / "r"), "--db", url])
    assert code == 1 and len(err.splitlines()) == 1
    assert "does not exist" in err and "createdb" in err
    assert not (tmp_path / "r" / ".mint").exists()


def test_a_six_digit_prefix_says_prefixes_need_seven(based, repo):
    cid = api.resolve(repo, "chat")
    line = one_line_error(based("show", cid[:6]))
    assert "7 or more hex digits" in line


def test_rollback_error_counts_the_holders(based, repo, models):
    ids = [api.resolve(repo, "chat")]
    for key in ("a2", "a3"):
        ids.append(based("commit", "chat", models[key], "-m", key, "--json").json()["id"])
    for cid in ids:
        assert based("promote", cid, "--to", "production").code == 0
    for _ in range(2):
        assert based("rollback", "chat@production").code == 0
    before = snapshot(repo)
    line = one_line_error(based("rollback", "chat@production"))
    assert "3 holders" in line and "one holder" not in line
    assert snapshot(repo) == before
