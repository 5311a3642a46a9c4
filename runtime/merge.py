"""A merge's computation: PEFT's own `add_weighted_adapter`, unmodified, over the base
(docs/merge.md). `mint.porcelain.merge` checks the inputs, checks them out and commits what
this writes; the CLI hands it `combine` (the core never imports torch or peft)."""

from __future__ import annotations

from pathlib import Path

MERGED = "default"  # saved at the folder's root, as a single adapter's save_pretrained does


def versions() -> dict[str, str]:
    """The libraries whose versions decide a merge's bytes, as a recipe records them."""
    import peft
    import torch

    return {"peft": peft.__version__, "torch": torch.__version__}


def combine(base_dir: str | Path, folders: list[Path], recipe: dict, out: Path) -> dict:
    """Load the adapters in FOLDERS over the base at BASE_DIR, merge them as RECIPE says
    (method, weights, density, svd_rank, seed) with PEFT's `add_weighted_adapter`, and save
    the result in OUT with `save_pretrained`. Returns the library versions it ran with."""
    import torch
    from peft import PeftModel

    from mint.runtime.loader import load_frozen

    model, _ = load_frozen(base_dir)
    names = [f"input{i}" for i in range(len(folders))]
    merged = PeftModel.from_pretrained(model, str(folders[0]), adapter_name=names[0])
    for name, folder in zip(names[1:], folders[1:]):
        merged.load_adapter(str(folder), adapter_name=name)
    options = {k: recipe[k] for k in ("density", "svd_rank") if recipe.get(k) is not None}
    torch.manual_seed(recipe["seed"])  # DARE's random drops: the recipe's seed makes them again
    merged.add_weighted_adapter(
        names, list(recipe["weights"]), MERGED, combination_type=recipe["method"], **options
    )
    # PEFT keeps the merged targets as a set and writes it in the set's order, which differs
    # from one process to the next (str hashes are salted): sorted, the bytes are made again
    config = merged.peft_config[MERGED]
    if isinstance(config.target_modules, set):
        config.target_modules = sorted(config.target_modules)
    # no embedding layers are saved (a merge has none of its own), and nothing is looked up on
    # the Hub to decide that: PEFT's "auto" fetches the base's config.json by its name
    merged.save_pretrained(str(out), selected_adapters=[MERGED], save_embedding_layers=False)
    return versions()
