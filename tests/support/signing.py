"""Signing helpers shared by test_signing and test_signing_sets: key pairs made by the real
`mint key generate`, and the unmodified model_signing CLI run as a process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODEL_SIGNING = str(Path(sys.executable).parent / "model_signing")


def model_signing_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([MODEL_SIGNING, *map(str, args)], capture_output=True, text=True)


def generate(mint, folder: Path, *extra) -> dict:
    """A key pair written by `mint key generate --out FOLDER` (its --json: paths, fingerprint)."""
    r = mint("key", "generate", "--out", folder, "--json", *extra)
    assert r.code == 0, r
    return r.json()


def verified_by_model_signing(folder: Path, public_key) -> subprocess.CompletedProcess:
    """`model_signing verify key FOLDER --signature FOLDER/model.sig --public_key KEY`."""
    return model_signing_cli(
        "verify", "key", folder, "--signature", folder / "model.sig", "--public_key", public_key
    )
