"""The README and docs/*.md point only at files that are in the repository.

Checked: every relative link `[text](path)` (from the page's folder) and every path written in
backticks outside code blocks that looks like one (`docs/vllm.md`, `tests/test_web.py::test`,
`mint/registry/routes_*.py`, `tests_vllm/`: a slash, and a file name with an extension or a
trailing slash), from the repository's root or the page's folder. What only exists once mint
runs is listed in RUN_TIME.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_TIME = {
    ".mint/",  # `mint init`
    ".mint/config.json",
    ".mint/objects/",  # the local blob store
    ".mint/statcache.db",  # the first commit
    "bench/out/",  # the benchmarks' results (`make bench`)
    "bench/out/bench_catalog.json",
    "train/",  # `python -m mint.examples.demo --keep DIR`, in DIR
    "macaron/",
}
FENCE = re.compile(r"^```.*?^```$", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
QUOTED = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"(?:\./)?[\w.*-]+(?:/[\w.*-]+)*(?:\.\w+|/)")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]+")  # a folder named in capitals: DIR, LINE


def prose(page: Path) -> str:
    return FENCE.sub("", page.read_text())


def quoted_paths(text: str) -> list[str]:
    """The backticked words of TEXT that are paths: a slash, and an extension or a final
    slash; `::test` and `:line` suffixes dropped. URLs, absolute paths and patterns with a
    placeholder folder (`DIR/model.sig`, `NAMESPACE/NAME`) are not paths."""
    found = []
    for word in QUOTED.findall(text):
        word = re.sub(r"(::|:\d).*$", "", word)
        placeholder = any(PLACEHOLDER.fullmatch(part) for part in word.split("/"))
        if "/" in word and PATH.fullmatch(word) and not word.startswith("/") and not placeholder:
            found.append(word)
    return found


def links(text: str) -> list[str]:
    """Relative link targets, anchors dropped (`#section` alone is this page)."""
    targets = (m.split("#")[0] for m in LINK.findall(text))
    return [t for t in targets if t and not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def exists(page: Path, path: str) -> bool:
    return any(list(folder.glob(path)) for folder in (ROOT, page.parent))


def test_every_path_and_link_in_the_docs_exists():
    missing = []
    for page in PAGES:
        text = prose(page)
        for target in links(text):
            if not (page.parent / target).exists():
                missing.append(f"{page.name}: link {target}")
        for path in quoted_paths(text):
            if path not in RUN_TIME and not exists(page, path.rstrip("/")):
                missing.append(f"{page.name}: `{path}`")
    assert not missing, "\n".join(missing)


def test_the_check_sees_what_it_checks():
    """The patterns find real paths and links, and report a missing one."""
    sample = "see `docs/vllm.md`, `tests/test_web.py::test_x`, `DIR/x.sig`, [w](docs/web.md)"
    assert quoted_paths(sample + " `mint init` `docs/README.md`") == [
        "docs/vllm.md",
        "tests/test_web.py",
        "docs/README.md",
    ]
    assert links(sample + " [x](https://a.b/c) [y](#top)") == ["docs/web.md"]
    assert not exists(ROOT / "README.md", "docs/no-such-page.md")
    assert len([p for page in PAGES for p in quoted_paths(prose(page))]) > 30
