"""Adapter commits: scanning and indexing an adapter folder, commit rows, and the operations."""
