"""Many processes moving one ref at once: nothing is lost, losers get one clear line."""

import json
import os
import shutil
import subprocess
import sys
import time

from mint import api

WORKERS = 8
# Each worker imports mint, then sleeps until the shared start time, so that all of them
# reach the database together.
LAUNCH = (
    "import sys, time; from mint.cli import main; "
    "time.sleep(max(0.0, float(sys.argv[1]) - time.time())); main(sys.argv[2:])"
)


def run_at_once(argvs: list[list[str]]) -> list[subprocess.CompletedProcess]:
    start = time.time() + 4.0
    env = {**os.environ, "MINT_USER": "racer"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LAUNCH, str(start), *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for argv in argvs
    ]
    results = []
    for argv, p in zip(argvs, procs):
        out, err = p.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(argv, p.returncode, out, err))
    return results


def test_eight_committers_on_one_line(repo, mint, models, tmp_path):
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    first = mint("commit", "chat", models["a1"], "-m", "start", "--json").json()["id"]
    folders = []
    for i in range(WORKERS):
        folder = tmp_path / f"v{i}"
        shutil.copytree(models["a2"], folder)
        (folder / "README.md").write_text(f"version {i}\n")
        folders.append(folder)
    results = run_at_once(
        [
            ["--repo", str(repo.root), "commit", "chat", str(f), "-m", f"w{i}", "--json"]
            for i, f in enumerate(folders)
        ]
    )
    won = [json.loads(r.stdout)["id"] for r in results if r.returncode == 0]
    lost = [r for r in results if r.returncode != 0]
    assert won, [r.stderr for r in results]
    for r in lost:
        lines = r.stderr.strip().splitlines()
        assert (
            len(lines) == 1 and "moved while updating" in lines[0] and "Traceback" not in r.stderr
        ), r.stderr
    history = [c.id for c in api.log(repo, "chat")]
    assert set(won) <= set(history)
    assert history[-1] == first and len(history) == len(won) + 1
    assert api.ls(repo)[0].commits == len(won) + 1
    assert api.fsck(repo).ok
