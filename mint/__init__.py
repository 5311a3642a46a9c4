"""mint: version control, a registry and a runtime for LoRA adapters."""

__version__ = "0.1.0"
