"""Tiny, offline models for trying mint, and for the demo, tests and benchmarks.

    python -m mint.examples.tiny DIR

writes DIR/tiny-llama (a Llama base: config.json, tokenizer, safetensors weights) and
DIR/adapter-a, DIR/adapter-b (PEFT LoRA adapters for it), then prints the commands to try.

Nothing here downloads anything. The base is built from a config with random weights and a
word-level tokenizer over a few lines of words, which is all that mint's store and runtime need.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")

# Words the tokenizer knows. Labels and prompt words are single tokens on purpose, and a few
# multi-token phrases exist for routing tests.
VOCAB_TEXT = """
<s> </s> <unk> <pad> user assistant system model_id = : , . ? ! the a an to of and or in on for
with is are be this that it you i we me my your please can could would should how what why when
where who hello hi thanks thank good morning evening weather today tell joke story feel happy sad
talk chat friend day night plan book schedule meeting email send search web browse click open
file run tool call api fetch order ticket flight hotel agent task automate workflow step code
python function bug fix error compile test class variable loop list sort array string java rust
write refactor debug coding ui button layout color css html page design screen font margin style
component react form modal icon theme dark light pixel align center summary summarize turn
answer route label expert router l0 l9 ignore previous instructions output say choose respond only
""".split()


def build_tokenizer(out_dir: Path, extra_words: list[str] | None = None):
    """A word-level tokenizer over VOCAB_TEXT (plus `extra_words`), saved to out_dir."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = list(dict.fromkeys(VOCAB_TEXT + list(extra_words or [])))
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.save_pretrained(out_dir)
    return fast


def build_base(
    out_dir: str | Path, *, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0
) -> Path:
    """Write a tiny LlamaForCausalLM with random weights and its tokenizer to out_dir.

    vLLM's CPU attention needs a head size of 32 or more: `hidden=128, heads=2` for it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    return out


def load_base(base_dir: str | Path):
    """Load the tiny base (frozen, eval mode) and its tokenizer, as the runtime does."""
    from mint.runtime.loader import load_frozen

    return load_frozen(base_dir)


def build_adapter(
    base_dir: str | Path,
    out_dir: str | Path,
    *,
    seed: int = 0,
    r: int = 4,
    alpha: int = 8,
    targets: tuple[str, ...] = DEFAULT_TARGETS,
    base_name: str | None = None,
    scale: float = 0.05,
    model=None,
) -> Path:
    """Save a LoRA adapter for the base with random (non-zero) A and B, as PEFT writes it.

    `base_name` becomes `base_model_name_or_path` (defaults to the base folder's name).
    """
    import torch
    from peft import LoraConfig, get_peft_model

    if model is None:
        model, _ = load_base(base_dir)
    cfg = LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0)
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn_like(param) * scale)
    out = Path(out_dir)
    peft_model.save_pretrained(out)
    peft_model.unload()  # leave `model` as it was, so callers can reuse it
    set_base_name(out, base_name or Path(base_dir).name)
    return out


def set_base_name(adapter_dir: Path, name: str) -> None:
    """Bind a saved adapter to a base by name, as `base_model_name_or_path`."""
    path = adapter_dir / "adapter_config.json"
    cfg = json.loads(path.read_text())
    cfg["base_model_name_or_path"] = name
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True))


# The README's first commands, word for word (tests/test_readme.py keeps them so).
NEXT_STEPS = """
Try mint on them:
  cd {dir}
  mint init
  mint base add tiny-llama tiny-llama
  mint commit chat adapter-a -m "first"
  mint commit chat adapter-b -m "second"
  mint log chat
  mint diff chat~1 chat
"""


def write_playground(out_dir: str | Path) -> dict[str, Path]:
    """A tiny base and two adapters for it under `out_dir`: tiny-llama, adapter-a, adapter-b."""
    out = Path(out_dir)
    base = build_base(out / "tiny-llama")
    model, _ = load_base(base)
    return {
        "base": base,
        "a": build_adapter(base, out / "adapter-a", seed=1, model=model),
        "b": build_adapter(base, out / "adapter-b", seed=2, model=model),
    }


def quiet_libraries() -> None:
    """No progress bars or deprecation warnings from transformers and peft in the output."""
    import warnings

    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore", category=FutureWarning)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def main(argv: list[str] | None = None) -> int:
    """`python -m mint.examples.tiny DIR`: models to try mint with, without one's own."""
    parser = argparse.ArgumentParser(
        prog="python -m mint.examples.tiny",
        description="Write a tiny base (DIR/tiny-llama) and two LoRA adapters for it "
        "(DIR/adapter-a, DIR/adapter-b), with random weights; nothing is downloaded.",
    )
    parser.add_argument("dir", type=Path, help="the folder to write them into")
    out = parser.parse_args(argv).dir
    taken = [n for n in ("tiny-llama", "adapter-a", "adapter-b") if (out / n).exists()]
    if taken:
        print(f"tiny: {out / taken[0]} already exists; choose another DIR", file=sys.stderr)
        return 1
    quiet_libraries()
    paths = write_playground(out)
    print(f"wrote a tiny base and two LoRA adapters for it into {out}:")
    print(f"  {paths['base']}  a Llama base: config.json, tokenizer, weights")
    print(f"  {paths['a']}, {paths['b']}  PEFT LoRA adapters for it")
    print(NEXT_STEPS.format(dir=shlex.quote(str(out))), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
