"""Every install line in the repository names mint's own distribution, mint-lora.

`mint` on PyPI is another project (an unrelated package, 0.5): `pip install 'mint[vllm]'`, as
the docs once said, installs that one on a new machine, a supply-chain risk as much as a failed
install. An install line names `mint-lora` (with its extras), or installs from a checkout or a
built wheel (`pip install .`, `pip install -e '.[test]'`, `pip install dist/...whl`).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from importlib.metadata import distribution
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# pip, pip3, python -m pip, uv pip, pipx `install`, uv and poetry `add`: then what is installed,
# up to the end of the shell command (or of the inline code it is quoted in)
INSTALL = re.compile(
    r"\b(?:(?:pip3?|uv pip|pipx)\s+install|(?:uv|poetry)\s+add)\s+(?P<rest>[^;&|`\n]*)"
)
BARE = re.compile(r"^mint(?:\[[^\]]*\])?(?:[=<>!~]=?.*)?$")


def install_lines(text: str) -> list[str]:
    """The install commands in TEXT: what follows `pip install` (and the like) on a line."""
    return [m["rest"] for m in INSTALL.finditer(text)]


def names_bare_mint(rest: str) -> bool:
    """Whether the arguments REST install the distribution named `mint`."""
    try:
        words = shlex.split(rest, comments=True)
    except ValueError:  # an unbalanced quote in prose: read it word by word
        words = rest.split()
    return any(BARE.match(w.strip("`'\",;()")) for w in words)


def documents() -> list[Path]:
    """The files a reader copies commands from, and those that print install hints."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    kinds = (".md", ".py", ".sh", ".toml", ".txt", ".cfg")
    return [ROOT / p for p in tracked if p.endswith(kinds) or Path(p).name == "Makefile"]


def test_no_document_installs_the_bare_name_mint():
    found = [
        f"{path.relative_to(ROOT)}: {rest.strip()}"
        for path in documents()
        if path.is_file() and path != Path(__file__)
        for rest in install_lines(path.read_text(errors="replace"))
        if names_bare_mint(rest)
    ]
    assert not found, "install lines that name PyPI's unrelated `mint`:\n" + "\n".join(found)


def test_the_check_catches_each_way_of_writing_it():
    caught = [
        "pip install 'mint[vllm]'",
        "~/vllm-env/bin/pip install mint",
        'python -m pip install "mint[sign]"',
        "pip install -U mint==0.1.0",
        "pipx install mint",
    ]
    fine = [
        "pip install 'mint-lora[vllm]'",
        "pip install .",
        "pip install -q -e '.[test]'",
        "pip install dist/mint_lora-0.1.0-py3-none-any.whl",
        "pip install 'moto[server]' boto3",
        "pip install torch==2.13.0",
    ]
    assert all(names_bare_mint(install_lines(x)[0]) for x in caught), caught
    assert not any(names_bare_mint(install_lines(x)[0]) for x in fine), fine


def test_the_installed_distribution_is_mint_lora_with_the_mint_command():
    dist = distribution("mint-lora")
    points = {(e.group, e.name): e.value for e in dist.entry_points}
    assert points[("console_scripts", "mint")] == "mint.cli:main"
    assert points[("vllm.general_plugins", "mint")] == "mint.vllm:register"
    assert 'name = "mint-lora"' in (ROOT / "pyproject.toml").read_text()
