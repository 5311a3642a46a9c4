"""A commit's model card: its `README.md`, read from the store (verified like every blob) and
rendered as Markdown for the commit page.

Markdown is CommonMark by markdown-it-py with raw HTML off: a `<script>` or `<img onerror>`
in the file is text on the page. Links and images keep only http, https and relative
targets (a `javascript:` or `data:` link is no link). The page's CSP runs no script anyway;
this is the first lock, not the only one."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from markdown_it import MarkdownIt

from mint.registry.upload import verified_chunks
from mint.store import ObjectStore

CARD = "README.md"
LIMIT = 256 * 1024  # bytes of a card the page renders; the rest is left out, and said so
_SCHEME = re.compile(r"^\s*([a-zA-Z][a-zA-Z0-9+.-]*):")
# A Hub model card opens with YAML between two `---` lines: shown as it is, not as Markdown.
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
# PEFT's template is full of HTML comments; with raw HTML off they would show as text.
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


@dataclass(frozen=True)
class Card:
    path: str
    html: str  # rendered by markdown-it with raw HTML off: safe to put in the page as is
    front: str  # the YAML front matter as text ('' without one)
    size: int  # of the whole file
    cut: bool  # the file is larger than LIMIT: only its first LIMIT bytes are rendered
    limit: int = LIMIT


def safe_link(url: str) -> bool:
    """Only http, https and relative targets (no javascript:, data:, file:, ...)."""
    found = _SCHEME.match(url)
    return found is None or found.group(1).lower() in ("http", "https")


@functools.cache
def markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable(
        ["table", "strikethrough"]
    )  # GFM, as the Hub
    md.validateLink = safe_link
    md.add_render_rule("link_open", _link_open)
    return md


def _link_open(self, tokens, idx, options, env) -> str:
    """A link in a card leaves nothing of the page behind it (no referrer, no opener)."""
    tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
    return self.renderToken(tokens, idx, options, env)


def read_text(store: ObjectStore, blob: str, limit: int) -> tuple[str, bool]:
    """The first LIMIT bytes of BLOB as text, and whether there were more. The whole blob is
    hashed on the way (BlobCorrupt if it is not what the commit names)."""
    kept, more = bytearray(), False
    for chunk in verified_chunks(store, blob):
        room = limit - len(kept)
        kept += chunk[:room]
        more = more or len(chunk) > room
    return kept.decode("utf-8", errors="replace"), more


def render_card(text: str) -> tuple[str, str]:
    """(the Markdown as HTML, the front matter) of a card's TEXT."""
    front = _FRONT.match(text)
    body = text[front.end() :] if front else text
    return markdown().render(_COMMENT.sub("", body)), front.group(1) if front else ""


def card_of(store: ObjectStore, files: dict) -> Card | None:
    """The model card of a commit whose files are FILES (None: it has no README.md)."""
    entry = files.get(CARD)
    return None if entry is None else _card(store, entry.sha256, entry.size)


# A blob never changes: its card is rendered once (markdown-it is pure Python: seconds for a
# dense 256 KiB file on a busy 2-core machine) and kept for the next views.
@functools.lru_cache(maxsize=64)
def _card(store: ObjectStore, blob: str, size: int) -> Card:
    text, cut = read_text(store, blob, LIMIT)
    html, front = render_card(text)
    return Card(CARD, html, front, size, cut)
