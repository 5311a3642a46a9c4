"""Adding a plain LoRA to the shared PeftModel without peft's walks over the whole model.

`PeftModel.add_adapter` followed by `set_peft_model_state_dict` walks every module of the
model several times per adapter (matching targets, marking trainable parameters, building the
state dict, casting dtypes), and each walk grows with the adapters already loaded: staging a
16-member set that way takes seconds on a small base, nearly all of it outside the tensors
themselves. For a plain LoRA (what `SharedBase._lora_expected` recognises: linear targets,
no DoRA, bias, patterns or other variants) whose target layers peft has already wrapped, this
module fills each wrapped layer's per-adapter tables directly, from the prepared tensors, and
registers the config: what peft's `update_layer` does for such an adapter, minus the random
initialisation that the weights overwrite and the walks.

It relies on peft's `LoraLayer` tables, so it checks them first: once per base, a probe adapter
is added to one layer through peft's own `update_layer`, and the tables it filled must be the
ones filled here; otherwise (another peft version, say) every adapter goes through peft's
API. Anything not covered (a target that peft has not wrapped yet, a dtype or device to cast
to in another way) goes through peft's API too, so the fast path only ever sets what peft
would have set, with the same values.
"""

from __future__ import annotations

from typing import Any

_PROBE = "mintprobe"
# The per-adapter tables a plain LoRA fills on a lora.Linear layer.
TABLES = frozenset(
    {"r", "lora_alpha", "scaling", "lora_dropout", "lora_A", "lora_B", "lora_bias"}
    | {"use_rslora", "use_dora"}
)
_PREFIX = "base_model.model."


def _is_fast_config(config: Any) -> bool:
    """Whether peft builds this config's layers the plain way: no pattern, variant, bias, or
    initialisation that reads or changes the base's weights (PiSSA, OLoRA, ...)."""
    return config.init_lora_weights in (True, False, "gaussian") and not (
        getattr(config, "rank_pattern", None)
        or getattr(config, "alpha_pattern", None)
        or getattr(config, "exclude_modules", None)
        or getattr(config, "fan_in_fan_out", False)
        or getattr(config, "lora_bias", False)
        or getattr(config, "use_qalora", False)
        or getattr(config, "alora_invocation_tokens", None)
        or getattr(config, "arrow_config", None)
        or getattr(config, "megatron_config", None)
    )


def _adapter_dtype(weight: Any) -> Any:
    """The dtype peft gives an adapter on a layer whose weight is WEIGHT: the base layer's
    (`_move_adapter_to_device_of_base_layer`), with half precisions upcast to float32
    (`cast_adapter_dtype`, on by default)."""
    import torch

    if weight.dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return weight.dtype


class FastLora:
    """The fast way in for one shared PeftModel; `add` returns False when peft's API must do it."""

    def __init__(self):
        self._layers: dict[str, Any] | None = None  # module name -> lora.Linear
        self._ok: bool | None = None  # the probe's verdict, once taken

    def forget_layers(self) -> None:
        """peft wrapped more layers (an adapter went through its API): look them up again."""
        self._layers = None

    def add(self, peft: Any, name: str, config: Any, state: dict, owned: bool) -> bool:
        """Add adapter NAME (CONFIG, its tensors STATE keyed as in its file) to PEFT, or change
        nothing and return False. OWNED: the tensors are this adapter's own memory (else they
        are copied, as peft copies into its parameters)."""
        import torch
        from peft.tuners.lora.layer import Linear as LoraLinear

        if not _is_fast_config(config):
            return False
        layers = self._wrapped(peft)
        plan = []
        for key_a in (k for k in state if k.endswith(".lora_A.weight")):
            module = key_a[len(_PREFIX) : -len(".lora_A.weight")]
            layer = layers.get(module)
            key_b = f"{_PREFIX}{module}.lora_B.weight"
            if type(layer) is not LoraLinear or key_b not in state or name in layer.lora_A:
                return False
            plan.append((layer, state[key_a], state[key_b]))
        if len(plan) * 2 != len(state) or not plan or not self._probe(plan[0][0]):
            return False
        if plan[0][0].resolve_lora_variant(config=config) is not None:  # DoRA, aLoRA, ...
            return False
        identity = torch.nn.Identity()  # stateless: one for every layer of this adapter
        for layer, a, b in plan:
            weight = layer.get_base_layer().weight
            dtype = _adapter_dtype(weight)
            r, alpha = a.shape[0], config.lora_alpha
            layer.r[name], layer.lora_alpha[name] = r, alpha
            layer.scaling[name] = alpha / (r**0.5) if config.use_rslora else alpha / r
            p = config.lora_dropout
            layer.lora_dropout[name] = torch.nn.Dropout(p=p) if p > 0 else identity
            layer.lora_A[name] = _linear(a, weight.device, dtype, owned)
            layer.lora_B[name] = _linear(b, weight.device, dtype, owned)
            layer.lora_bias[name] = False
            layer.use_rslora[name] = config.use_rslora
            layer.use_dora[name] = False
        peft.peft_config[name] = config
        return True

    def _wrapped(self, peft: Any) -> dict[str, Any]:
        if self._layers is None:
            from peft.tuners.lora.layer import LoraLayer

            model = peft.base_model.model
            self._layers = {n: m for n, m in model.named_modules() if isinstance(m, LoraLayer)}
        return self._layers

    def _probe(self, layer: Any) -> bool:
        """Whether peft's own `update_layer` fills exactly TABLES for a plain adapter."""
        if self._ok is None:
            try:
                from peft import LoraConfig

                plain = LoraConfig(r=1, lora_alpha=1, target_modules=["x"], inference_mode=True)
                layer.update_layer(_PROBE, 1, 1, plain)
                filled = {
                    attr
                    for attr in [*vars(layer), *layer._modules]
                    if isinstance(getattr(layer, attr, None), (dict, _dicts()))
                    and _PROBE in getattr(layer, attr)
                }
                self._ok = filled == TABLES
            except Exception:  # noqa: BLE001 - any surprise: peft's API does the work
                self._ok = False
            finally:
                layer.delete_adapter(_PROBE)
        return self._ok


def _dicts() -> tuple:
    import torch

    return (torch.nn.ModuleDict, torch.nn.ParameterDict)


def _linear(weight: Any, device: Any, dtype: Any, owned: bool) -> Any:
    """An nn.Linear (no bias) holding WEIGHT as its parameter, built without initialising it:
    `nn.Linear(...)` would fill a fresh weight with random numbers, only to drop it."""
    import torch

    module = torch.nn.Linear.__new__(torch.nn.Linear)
    torch.nn.Module.__init__(module)
    module.out_features, module.in_features = weight.shape
    value = weight.to(device=device, dtype=dtype, copy=not owned)
    module.weight = torch.nn.Parameter(value, requires_grad=False)
    module.register_parameter("bias", None)
    return module.eval()
