"""mint installs like a package: a built wheel, installed into a fresh venv, works.

An editable install can hide a package missing from the wheel; this test builds the wheel,
installs it (without dependencies) into a new virtual environment that borrows the test
venv's installed dependencies, and runs the `mint` command it installed.
"""

from __future__ import annotations

import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> tuple[Path, str]:
    """The wheel `pip wheel` builds from this checkout, and what the build printed."""
    tmp = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip"]
    done = subprocess.run(
        [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", ROOT],
        check=True,
        capture_output=True,
        text=True,
    )
    return next((tmp / "dist").glob("*.whl")), done.stdout + done.stderr


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory, built_wheel) -> Path:
    tmp = tmp_path_factory.mktemp("wheel-venv")
    pip = [sys.executable, "-m", "pip"]
    wheel = built_wheel[0]
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    # Borrow the dependencies: a plain path line, so the editable install's own .pth
    # (which would put the checkout on the path) is not processed.
    purelib = next(env_dir.glob("lib/python*/site-packages"))
    (purelib / "borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--no-compile", "--target", purelib, wheel],
        check=True,
        capture_output=True,
    )
    return env_dir


def run(env_dir: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [env_dir / "bin" / "python", "-m", "mint", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_wheel_is_mint_lora_and_builds_without_warnings(built_wheel):
    """`mint` on PyPI is another project: the distribution is mint-lora (the command and the
    import name stay `mint`), and building it prints none of setuptools' warnings (a data
    folder, such as the web pages' static/, missing from the packages gave one each)."""
    wheel, printed = built_wheel
    assert wheel.name.startswith("mint_lora-"), wheel.name
    assert "Warning" not in printed and "absent from the `packages`" not in printed, printed
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
    assert "mint/registry/web/static/style.css" in names
    # the command, and the plugin vLLM finds by its entry point group, keep their names
    assert "[console_scripts]\nmint = mint.cli:main" in points.decode()
    assert "[vllm.general_plugins]\nmint = mint.vllm:register" in points.decode()


def test_wheel_holds_every_package_and_runs(wheel_venv, tmp_path):
    where = subprocess.run(
        [
            wheel_venv / "bin" / "python",
            "-c",
            "import mint.cli, mint.store, mint.runtime, "
            "mint.examples, mint.migrations, mint.commits; print(mint.__file__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0, where.stderr
    assert str(wheel_venv) in where.stdout and str(ROOT) not in where.stdout
    version = run(wheel_venv, "--version", cwd=tmp_path)
    assert version.returncode == 0 and "mint" in version.stdout, version.stderr
    init = run(wheel_venv, "init", tmp_path / "r", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    assert (tmp_path / "r" / ".mint" / "mint.db").exists()
    upgrade = run(wheel_venv, "--repo", tmp_path / "r", "db", "upgrade", cwd=tmp_path)
    assert upgrade.returncode == 0 and "schema at" in upgrade.stdout, upgrade.stderr
    ls = run(wheel_venv, "--repo", tmp_path / "r", "ls", "--json", cwd=tmp_path)
    assert ls.returncode == 0 and ls.stdout.strip() == "[]", ls.stderr


WEB_CHECK = """
import sys
from fastapi.testclient import TestClient
from mint import api
from mint.registry.app import create_app
from mint.team.tokens import token_create
from mint.registry.web import render

repo, _ = api.init(sys.argv[1])
client = TestClient(create_app(repo))
client.cookies.set("mint_session", token_create(repo, "t", "reader", by="t").token)
page, css = client.get("/"), client.get("/static/style.css")
assert page.status_code == 200 and "<h1>Lines</h1>" in page.text, page.text[:300]
assert css.status_code == 200 and "timeline" in css.text
print(render.TEMPLATES)
"""


def test_wheel_holds_the_web_pages_templates(wheel_venv, tmp_path):
    done = subprocess.run(
        [wheel_venv / "bin" / "python", "-c", WEB_CHECK, tmp_path / "r"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(wheel_venv) in done.stdout and str(ROOT) not in done.stdout
