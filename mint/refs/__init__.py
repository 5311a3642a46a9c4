"""Refs: names, revisions, and the container that moves refs by compare-and-swap."""

from mint.refs.container import Ref, RefsContainer
from mint.refs.revisions import (
    Resolved,
    check_name,
    check_text,
    find_line,
    is_hex_prefix,
    resolve,
)

__all__ = [
    "Ref",
    "RefsContainer",
    "Resolved",
    "check_name",
    "check_text",
    "find_line",
    "is_hex_prefix",
    "resolve",
]
