"""Alembic migrations for mint's metadata database (installed as mint.migrations)."""
