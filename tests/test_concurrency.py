"""Many processes moving one ref at once: nothing is lost, losers get one clear line."""

import json
import shutil

from mint import api

from support.concurrency import run_at_once

WORKERS = 8


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
