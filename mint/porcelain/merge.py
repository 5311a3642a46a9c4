"""`mint merge`: adapters merged with PEFT's `add_weighted_adapter` over their base, committed
as a commit whose parents are its inputs (after its line's head), with the recipe that makes it
again in its provenance; `mint merge --replay` makes it again and compares the bytes
(docs/merge.md). Written once over the backend; the computation itself (torch, PEFT) is handed
in as COMBINE by the caller (`mint.runtime.merge.combine`), so the core imports neither."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from mint.backend import Backend, backend_of
from mint.errors import InvalidConfig, MergeMismatch
from mint.ids import CommitId, Kind
from mint.objects import CommitDetail, CommitResult, MergeReplay
from mint.porcelain.commit import check_inputs, commit
from mint.porcelain.files import checkout
from mint.porcelain.harness import base_folder
from mint.store import sha256_file

METHODS = ("linear", "ties", "dare_linear", "dare_ties", "svd", "cat")
DENSITY = {"ties", "dare_linear", "dare_ties"}  # they prune: a density is needed
SAME_SHAPE = {"linear", "ties", "dare_linear", "dare_ties"}  # factor by factor: one r, targets
MAX_SEED = 2**63 - 1

# combine(base folder, input folders, recipe, out folder) -> {"peft": version, "torch": version}
Combine = Callable[[Path, list[Path], dict, Path], dict]


def merge(
    repo,
    line: str,
    revs: list[str],
    *,
    method: str,
    message: str,
    author: str,
    combine: Combine,
    weights: list[float] | None = None,
    density: float | None = None,
    seed: int | None = None,
    svd_rank: int | None = None,
    base_dir: str | None = None,
) -> CommitResult:
    """Merge the adapters REVS by METHOD (weights default to equal shares summing to 1; SEED,
    default 0, seeds DARE's drops) and commit the result on LINE with every input a parent."""
    b = backend_of(repo)
    check_inputs(line, message)
    details = [_adapter(b, rev) for rev in revs]
    recipe = make_recipe(details, method, weights, density, seed, svd_rank)
    check_compatible(details, recipe)
    base = base_folder(b, details[0], base_dir)
    with tempfile.TemporaryDirectory(prefix="mint-merge-") as tmp:
        out, versions = _made(repo, details, recipe, base, Path(tmp), combine)
        return commit(
            repo,
            line,
            out,
            message,
            author=author,
            base=details[0].base,
            provenance={"merge": recipe | versions},
            parents=[d.id for d in details],
        )


def merge_replay(repo, rev: str, *, combine: Combine, base_dir: str | None = None) -> MergeReplay:
    """Make REV's merge again from its recorded recipe and compare every file's bytes."""
    b = backend_of(repo)
    detail = b.show(rev)
    recipe = recipe_of(detail)
    if recipe is None or not isinstance(recipe.get("inputs"), list):
        raise InvalidConfig(f"{detail.id[:12]} is no merge: its provenance holds no recipe")
    details = [_adapter(b, cid) for cid in recipe["inputs"]]
    made = [recipe.get(k) for k in ("method", "weights", "density", "seed", "svd_rank")]
    again = make_recipe(details, *made)  # checked as a new merge's: a stored row may hold anything
    check_compatible(details, again)
    base = base_folder(b, details[0], base_dir)
    with tempfile.TemporaryDirectory(prefix="mint-merge-") as tmp:
        out, versions = _made(repo, details, again, base, Path(tmp), combine)
        files = tree_files(out)
    recorded = {path: f.sha256 for path, f in detail.files.items()}
    differ = sorted(p for p in set(files) | set(recorded) if files.get(p) != recorded.get(p))
    then = {k: recipe.get(k) for k in ("peft", "torch")}
    return MergeReplay(CommitId(detail.id), not differ, differ, then, versions)


def _made(repo, details, recipe: dict, base: Path, tmp: Path, combine: Combine):
    """(the folder the merge of DETAILS was saved in, the library versions that made it)."""
    folders = [tmp / f"input{i}" for i in range(len(details))]
    for folder, d in zip(folders, details):
        checkout(repo, d.id, folder)
    versions = combine(base, folders, recipe, tmp / "merged")
    return tmp / "merged", dict(versions)


def _adapter(b: Backend, rev: str) -> CommitDetail:
    d = b.show(rev)
    if d.kind != Kind.ADAPTER:
        raise MergeMismatch(f"{rev} is a {d.kind} commit; only adapters merge")
    return d


def make_recipe(details, method, weights, density, seed, svd_rank) -> dict:
    """The recipe of a merge of DETAILS, each value checked; what `--replay` runs again."""
    if method not in METHODS:
        raise InvalidConfig(f"unknown merge method {method!r} (known: {', '.join(METHODS)})")
    n = len(details)
    if n < 2:
        raise MergeMismatch("a merge takes two adapters or more")
    if weights is not None and not isinstance(weights, (list, tuple)):
        raise MergeMismatch(f"weights are {weights!r}: one number per adapter")
    weights = [1 / n] * n if weights is None else list(weights)
    if len(weights) != n or not all(_finite(w) for w in weights):
        raise MergeMismatch(f"{n} adapters take {n} finite weights, not {weights}")
    if method in DENSITY and density is None:
        raise InvalidConfig(f"{method} prunes: it needs a density (0 < D <= 1)")
    if method not in DENSITY and density is not None:
        raise InvalidConfig(f"a density is for {', '.join(sorted(DENSITY))}, not {method}")
    if density is not None and not (_finite(density) and 0 < density <= 1):
        raise InvalidConfig(f"density {density} is outside 0 < D <= 1")
    if svd_rank is not None and (method != "svd" or not isinstance(svd_rank, int) or svd_rank < 1):
        raise InvalidConfig("a rank is for svd, a whole number 1 or more")
    seed = 0 if seed is None else seed
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise InvalidConfig(f"seed {seed} is not a whole number from 0 to {MAX_SEED}")
    return {
        "method": method,
        "inputs": [d.id for d in details],
        "weights": [float(w) for w in weights],
        "density": None if density is None else float(density),
        "svd_rank": svd_rank,
        "seed": seed,
    }


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_compatible(details: list[CommitDetail], recipe: dict) -> None:
    """What add_weighted_adapter needs of its inputs, checked before anything loads: one
    base, LoRA without DoRA, and for the methods that merge factor by factor one rank and one
    set of targets. The first mismatch is named."""
    first, method = details[0], recipe["method"]
    seen: set[str] = set()
    for d in details:
        if d.id in seen:
            raise MergeMismatch(f"{d.id[:12]} is given twice")
        seen.add(d.id)
        if d.base_fingerprint != first.base_fingerprint:
            raise MergeMismatch(
                f"{_name(d)} is on base {d.base}, {_name(first)} on base {first.base}"
            )
        peft, config = d.peft or {}, d.config or {}
        if peft.get("peft_type") != "LORA":
            raise MergeMismatch(f"{_name(d)} is {peft.get('peft_type')}, not LORA")
        if config.get("use_dora"):
            raise MergeMismatch(f"{_name(d)} uses DoRA, which add_weighted_adapter cannot merge")
        if method in SAME_SHAPE:
            _same_shape(first, d, method)
    saving = [d for d in details if (d.config or {}).get("modules_to_save")]
    if len(saving) > 1:
        raise MergeMismatch(f"{_name(saving[0])} and {_name(saving[1])} both save whole modules")


def _same_shape(first: CommitDetail, d: CommitDetail, method: str) -> None:
    a, b = first.peft or {}, d.peft or {}
    if (a.get("r"), _pattern(first)) != (b.get("r"), _pattern(d)):
        raise MergeMismatch(
            f"{method} needs one rank: {_name(first)} has r={a.get('r')}, "
            f"{_name(d)} r={b.get('r')} (svd and cat merge different ranks)"
        )
    if _targets(a) != _targets(b):
        raise MergeMismatch(
            f"{method} needs the same targets: {_name(first)} has {_targets(a)}, {_name(d)} "
            f"{_targets(b)} (svd and cat merge different ones)"
        )


def _pattern(d: CommitDetail) -> dict:
    return (d.config or {}).get("rank_pattern") or {}


def _targets(peft: dict) -> object:
    t = peft.get("target_modules")
    return sorted(t) if isinstance(t, list) else t


def _name(d: CommitDetail) -> str:
    return f"{d.line}@{d.id[:12]}"


def recipe_of(detail: CommitDetail) -> dict | None:
    """The merge recipe DETAIL's provenance records, or None when it is no merge."""
    recipe = (detail.provenance or {}).get("merge")
    return recipe if isinstance(recipe, dict) else None


def tree_files(folder: str | os.PathLike) -> dict[str, str]:
    """path -> sha256 of every file under FOLDER."""
    root = Path(folder)
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in root.rglob("*") if p.is_file()}


# --- merges as candidates ------------------------------------------------------------------

MERGES = ".merges"  # the merges the loop proposes for members of line L go on line L.merges
PROPOSED_DENSITY = 0.5  # what a proposed ties or dare merge keeps


def merge_candidates(
    b: Backend, detail: CommitDetail, sources: dict, lines: list[str] | None, methods
) -> list:
    """Merges of each member of the set DETAIL with the newer head of its line (a member on
    L.merges counts as L's), one candidate per METHOD: equal weights, density 0.5 where the
    method prunes, seed 0. One already made is named; one that cannot merge is not proposed."""
    from mint.porcelain.commit import members_of

    for method in methods:
        if method not in METHODS:
            raise InvalidConfig(f"unknown merge method {method!r} (known: {', '.join(METHODS)})")
    held = members_of(detail)
    out = []
    for label, line in sources.items():
        source = line.removesuffix(MERGES)
        if lines and source not in lines:
            continue
        pair = _newer(b, held[label], source)
        for method in methods if pair else ():
            proposal = _proposal(b, detail, label, source, pair, method)
            if proposal is not None:
                out.append(proposal)
    return out


def _newer(b: Backend, held: str, line: str) -> list[CommitDetail] | None:
    """[the member, LINE's head] when the head is newer and neither is a merge of the other."""
    head, _ = b.line_head(line, Kind.ADAPTER)
    if head is None or head == held:
        return None
    pair = [b.show(held), b.show(head)]
    for a, other in (pair, pair[::-1]):
        if other.id in ((recipe_of(a) or {}).get("inputs") or []):
            return None
    return pair


def _proposal(b: Backend, detail, label: str, source: str, pair, method: str):
    from mint.objects import Candidate
    from mint.porcelain.commit import candidate_of, members_of

    density = PROPOSED_DENSITY if method in DENSITY else None
    recipe = make_recipe(pair, method, None, density, 0, None)
    try:
        check_compatible(pair, recipe)
    except MergeMismatch:
        return None
    line = source + MERGES
    made = find_merge(b, line, recipe)
    what = f"{method} merge of {label} {pair[0].id[:12]} with {source} head {pair[1].id[:12]}"
    merges = {label: {"recipe": recipe, "line": line}}
    if made is not None:
        return candidate_of(b, detail, {label: made}, [source], what, merges)
    return Candidate(what, detail.id, members_of(detail), [], [source], None, merges)


def find_merge(b: Backend, line: str, recipe: dict) -> CommitId | None:
    """The newest merge on LINE (of its last 200 commits) made by RECIPE, or None."""
    from mint.errors import RevisionNotFound

    try:
        log = b.log(line, 200)
    except RevisionNotFound:
        return None
    for c in log:
        if c.line == line and len(c.parents) > 1:
            found = recipe_of(b.show(c.id)) or {}
            if all(found.get(k) == v for k, v in recipe.items()):
                return CommitId(c.id)
    return None
