"""MoL sets: mol.toml, set commits, and how a set lays out on disk."""
