"""Examples beside the core: the demo, tiny models built from a config, and the demo training.

They use torch, transformers and peft, which the core never imports at module level.
"""
