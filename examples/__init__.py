"""Examples beside the core: the demo, tiny models built from a config, and the demo training.

- `python -m mint.examples.tiny DIR`: a tiny base and two adapters to try mint with.
- `python -m mint.examples.demo` (`make demo`): the whole MoL story, end to end.

They use torch, transformers and peft, which the core never imports at module level.
"""
