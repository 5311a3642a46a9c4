"""Marks shared by test modules that run on one database (`one_database`, tests/conftest.py)."""

from __future__ import annotations

import pytest

# Modules that read lines at revisions through a registry (the Hub's protocol, pulls).
REVISIONS_ON_POSTGRESQL = pytest.mark.one_database(
    "postgresql",
    "revisions resolve through the functions test_commit and test_history run on both databases",
)
