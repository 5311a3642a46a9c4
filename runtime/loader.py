"""Load a frozen base once and a set's adapters onto it; check everything, then change anything.

One `SharedBase` holds the transformers model, its tokenizer and one `PeftModel` that carries
the adapters of every loaded set version. An adapter is named after its commit id, so two
versions of a set can sit side by side while one is staged, and a commit shared by both (or
by two roles of one set, such as the `chat` expert that also writes summaries) is loaded once.
Adapters are reference counted and removed when the last version using them is retired.

Loading an adapter has two levels, as in peft's hotswap: `prepare` reads the weights where
they lie (memory-mapped by safetensors) and checks that they fit the base exactly, with no
missing, unexpected or misshapen tensors. A plain LoRA is checked against the base's layer
shapes directly; any other configuration is loaded into a meta-device skeleton of the base,
which costs as much as a real load but builds nothing that takes memory. Only a fully prepared
adapter is ever injected into the serving model, under the model lock.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mint.bases import fingerprint_path
from mint.errors import BaseFolderMismatch
from mint.objects import AdapterFiles
from mint.runtime.errors import AdapterLoadError
from mint.runtime.inject import FastLora

_SKELETON_NAME = "mintcheck"


def adapter_name(commit_id: str) -> str:
    """The name a commit's adapter has inside the shared PeftModel."""
    return f"c{commit_id[:16]}"


def peft_config_from_dict(config: dict, commit_id: str = "?"):
    """Build the PeftConfig subclass named by `config["peft_type"]`, for inference."""
    from peft import PeftConfig, PeftType

    if not isinstance(config, dict) or "peft_type" not in config:
        raise AdapterLoadError(commit_id, "adapter_config.json has no peft_type")
    try:
        PeftType(config["peft_type"])
        cfg = PeftConfig.from_peft_type(**config)
    except (ValueError, TypeError, KeyError) as exc:
        raise AdapterLoadError(commit_id, f"bad adapter config: {exc}") from None
    cfg.inference_mode = True
    return cfg


def read_weights(path: str | Path, commit_id: str = "?") -> dict[str, Any]:
    """Every tensor of a safetensors file, read through safetensors' memory map (no copies)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            return {key: handle.get_tensor(key) for key in handle.keys()}
    except FileNotFoundError:
        raise AdapterLoadError(commit_id, f"weights file {path} is missing") from None
    except Exception as exc:  # noqa: BLE001 - safetensors' own SafetensorError, OSErrors
        raise AdapterLoadError(commit_id, f"weights are not valid safetensors: {exc}") from None


@dataclass(frozen=True)
class PreparedAdapter:
    """An adapter read and checked against the base, not yet injected anywhere."""

    commit_id: str
    name: str
    config: Any  # peft.PeftConfig
    state: dict = field(repr=False)
    owned: bool = False  # the tensors own their memory (else they are views of a mapped file)


def _check_tensors(commit_id: str, state: dict, finite: bool = True) -> None:
    """Refuse empty files and tensors that are not floats, or (FINITE) not finite."""
    import torch

    if not state:
        raise AdapterLoadError(commit_id, "the weights file holds no tensors")
    for key, tensor in state.items():
        if not tensor.is_floating_point():
            raise AdapterLoadError(commit_id, f"tensor {key} is {tensor.dtype}, not a float")
        if finite and not bool(torch.isfinite(tensor).all()):
            raise AdapterLoadError(commit_id, f"tensor {key} holds NaN or infinite values")


def _own_missing(missing: Iterable[str], name: str) -> list[str]:
    """Missing keys that belong to adapter `name` (the base's own weights are not in the file)."""
    return [k for k in missing if f".{name}." in k or k.endswith(f".{name}")]


def _layer_shapes(model: Any) -> dict[str, tuple[str, int, int]]:
    """Module name -> (kind, in, out) of every Linear and Embedding: what LoRA can target."""
    import torch

    shapes = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            shapes[name] = ("linear", module.in_features, module.out_features)
        elif isinstance(module, torch.nn.Embedding):
            shapes[name] = ("embedding", module.num_embeddings, module.embedding_dim)
    return shapes


def load_frozen(path: str | Path) -> tuple[Any, Any]:
    """(model, tokenizer) of a base folder: the model frozen and in eval mode, padding set."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    for param in model.parameters():
        param.requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


class SharedBase:
    """The frozen base, its tokenizer, and the one PeftModel that holds every loaded adapter.

    All use of the model goes through `using(name)`, which holds the model lock: PEFT's active
    adapter is state on the model, so two threads must not interleave their forward passes.
    """

    def __init__(self, path: str | Path, model: Any, tokenizer: Any, fingerprint: str):
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.tokenizer = tokenizer
        self.config = model.config
        self._raw = model
        self._peft = None  # created with the first adapter
        self._refs: dict[str, int] = {}  # adapter name -> number of engines using it
        self._lock = threading.RLock()  # guards the model and the adapter table
        self._layers = _layer_shapes(model)  # taken before peft wraps any layer
        self.loads = 0  # adapters read from their files (`prepare`), for the CPU tier's sake
        self._fast = FastLora()  # plain LoRAs added without peft's model-wide walks
        self.fast_lora = True  # False: every adapter through peft's API (a reference path)

    @classmethod
    def load(cls, path: str | Path) -> SharedBase:
        """Load a base model folder: frozen, in eval mode, with its tokenizer."""
        fingerprint = fingerprint_path(path)
        return cls(path, *load_frozen(path), fingerprint)

    def check_fingerprint(self, expected: str, what: str = "the set") -> None:
        """Raise BaseMismatch unless this base is the one `what` was committed against."""
        if expected != self.fingerprint:
            raise BaseFolderMismatch(what, expected, str(self.path), self.fingerprint)

    # --- level 1: read and check, change nothing -------------------------------------

    def prepare(self, files: AdapterFiles) -> PreparedAdapter:
        """Read one adapter's weights and check that they load fully onto this base."""
        return self.prepare_state(files, read_weights(files.weights, files.commit_id))

    def prepare_state(
        self, files: AdapterFiles, state: dict, *, owned: bool = False, finite: bool = False
    ) -> PreparedAdapter:
        """Check tensors already read (from a set's pack, say) against this base, as `prepare`
        checks a file's; OWNED: they are the adapter's own memory, not views of a file;
        FINITE: the caller checked that their values are finite (in one pass over them all)."""
        name = adapter_name(files.commit_id)
        self.loads += 1
        config = peft_config_from_dict(files.config, files.commit_id)
        _check_tensors(files.commit_id, state, finite=not finite)
        if not self._check_lora_shapes(files.commit_id, config, state):
            self._check_on_skeleton(files.commit_id, config, state)
        return PreparedAdapter(files.commit_id, name, config, state, owned)

    def _check_lora_shapes(self, commit_id: str, config: Any, state: dict) -> bool:
        """Exact-fit check of a plain LoRA against the base's layer shapes, building nothing.

        Returns False, having checked nothing, for configurations it does not cover (DoRA,
        biases, modules_to_save, `all-linear`, ...): those go through the meta skeleton.
        """
        expected = self._lora_expected(config)
        if expected is None:
            return False
        found = {k: tuple(v.shape) for k, v in state.items()}
        missing = sorted(set(expected) - set(found))
        unexpected = sorted(set(found) - set(expected))
        if missing or unexpected:
            raise AdapterLoadError(
                commit_id,
                f"{len(missing)} missing and {len(unexpected)} unexpected tensors "
                f"(first: {(missing + unexpected)[0]})",
            )
        for key, shape in expected.items():
            if found[key] != shape:
                raise AdapterLoadError(
                    commit_id,
                    f"tensor {key} has shape {list(found[key])}, the base needs {list(shape)}",
                )
        return True

    def _lora_expected(self, config: Any) -> dict[str, tuple[int, int]] | None:
        """Tensor name -> shape of a plain LoRA with `config` on this base; None if not plain."""
        from peft import PeftType
        from peft.tuners.tuners_utils import check_target_module_exists
        from peft.utils.other import get_pattern_key

        plain = (
            config.peft_type == PeftType.LORA
            and not isinstance(config.target_modules, str)
            and config.target_modules
            and not (
                config.use_dora
                or config.modules_to_save
                or getattr(config, "target_parameters", None)
                or getattr(config, "trainable_token_indices", None)
                or config.bias != "none"
            )
        )
        if not plain:
            return None
        expected = {}
        for name, (kind, rows, cols) in self._layers.items():
            if not check_target_module_exists(config, name):
                continue
            pattern = get_pattern_key(list(config.rank_pattern or {}), name)
            r = (config.rank_pattern or {}).get(pattern, config.r)
            a, b = (
                ("lora_A.weight", "lora_B.weight")
                if kind == "linear"
                else ("lora_embedding_A", "lora_embedding_B")
            )
            expected[f"base_model.model.{name}.{a}"] = (r, rows)
            expected[f"base_model.model.{name}.{b}"] = (cols, r)
        return expected

    def _check_on_skeleton(self, commit_id: str, config: Any, state: dict) -> None:
        """Load `state` into a meta-device copy of the base and demand an exact fit."""
        from peft import PeftModel, set_peft_model_state_dict

        skeleton = self._meta_skeleton()
        try:
            probe = PeftModel(
                skeleton, config, adapter_name=_SKELETON_NAME, low_cpu_mem_usage=True
            )
            result = set_peft_model_state_dict(
                probe, state, adapter_name=_SKELETON_NAME, low_cpu_mem_usage=True
            )
        except Exception as exc:  # noqa: BLE001 - peft's ValueError, RuntimeError, ...
            raise AdapterLoadError(commit_id, f"does not fit the base: {exc}") from None
        missing = _own_missing(result.missing_keys, _SKELETON_NAME)
        if missing or result.unexpected_keys:
            raise AdapterLoadError(
                commit_id,
                f"{len(missing)} missing and {len(result.unexpected_keys)} unexpected tensors "
                f"(first: {(missing + list(result.unexpected_keys))[0]})",
            )

    def _meta_skeleton(self):
        """A fresh weightless copy of the base's architecture, on the meta device."""
        import torch
        from transformers import AutoModelForCausalLM

        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(self.config)

    # --- level 2: change the serving model -------------------------------------------

    def acquire(self, prepared: Iterable[PreparedAdapter], names: Iterable[str]) -> bool:
        """Take one reference on each of `names`, injecting the prepared ones not loaded yet.

        Returns False, changing nothing, when a name is neither loaded nor prepared (it was
        unloaded since the caller looked); the caller prepares it and tries again.
        """
        ready = {p.name: p for p in prepared}
        names = list(dict.fromkeys(names))
        with self._lock:
            if any(n not in self._refs and n not in ready for n in names):
                return False
            fresh = [n for n in names if n not in self._refs]
            injected = []
            try:
                for name in fresh:
                    self._inject(ready[name])
                    injected.append(name)
            except Exception:
                for name in injected:  # leave the model as it was
                    self._peft.delete_adapter(name)
                raise
            for name in names:
                self._refs[name] = self._refs.get(name, 0) + 1
        return True

    def has(self, name: str) -> bool:
        """Whether an adapter of that name is loaded."""
        with self._lock:
            return name in self._refs

    def _inject(self, adapter: PreparedAdapter) -> None:
        from peft import PeftModel, set_peft_model_state_dict

        if (
            self._peft is not None
            and self.fast_lora
            and self._fast.add(
                self._peft, adapter.name, adapter.config, adapter.state, adapter.owned
            )
        ):
            return  # a plain LoRA on layers peft wrapped already (see `inject`)
        self._fast.forget_layers()  # peft's API may wrap more layers
        if self._peft is None:
            self._peft = PeftModel(self._raw, adapter.config, adapter_name=adapter.name)
        else:
            self._peft.add_adapter(adapter.name, adapter.config)
        result = set_peft_model_state_dict(self._peft, adapter.state, adapter_name=adapter.name)
        # prepare() proved the fit on the skeleton; this guards against peft contradicting itself
        missing = _own_missing(result.missing_keys, adapter.name)
        if missing or result.unexpected_keys:
            self._peft.delete_adapter(adapter.name)
            raise AdapterLoadError(
                adapter.commit_id, "peft reported missing or unexpected tensors"
            )
        self._peft.eval()

    def release(self, names: Iterable[str]) -> None:
        """Drop one reference on each adapter; unload those no version uses any more."""
        with self._lock:
            for name in names:
                self._refs[name] -= 1
                if self._refs[name] == 0 and len(self._refs) > 1:
                    del self._refs[name]
                    # deleting the active adapter makes peft warn; make a survivor active first
                    self._peft.set_adapter(next(iter(self._refs)))
                    self._peft.delete_adapter(name)
                    self._fast.forget_layers()  # look the wrapped layers up again

    def loaded(self) -> dict[str, int]:
        """Adapter name -> number of loaded set versions that use it."""
        with self._lock:
            return dict(self._refs)

    @contextlib.contextmanager
    def using(self, name: str) -> Iterator[Any]:
        """Hold the model lock with adapter `name` active; yields the PeftModel."""
        import torch

        with self._lock, torch.inference_mode():
            self._peft.set_adapter(name)
            yield self._peft

    @property
    def max_positions(self) -> int:
        """How many tokens one sequence may hold."""
        value = getattr(self.config, "max_position_embeddings", None)
        return int(value) if value and not math.isinf(value) else 2048
