"""An evaluator for the README's contract example: weight statistics of an adapter checkout.

    python -m mint.examples.evaluate CHECKOUT_DIR

prints one JSON object: `lora_norm` (the Frobenius norm of all LoRA weights) and `finite`
(1.0 when every weight is a finite number). A real contract runs a benchmark here; this one
needs nothing but the checkout, so the usage guide runs as written.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def measure(folder: Path) -> dict[str, float]:
    import numpy as np
    from safetensors.numpy import load_file

    tensors = load_file(folder / "adapter_model.safetensors")
    values = [t.astype(np.float64).ravel() for t in tensors.values()]
    flat = np.concatenate(values) if values else np.zeros(0)
    finite = bool(np.isfinite(flat).all())
    return {"lora_norm": float(np.linalg.norm(flat)) if finite else 0.0, "finite": float(finite)}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m mint.examples.evaluate CHECKOUT_DIR", file=sys.stderr)
        return 2
    print(json.dumps(measure(Path(argv[0]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
