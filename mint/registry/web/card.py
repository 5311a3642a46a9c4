"""A commit's model card: its `README.md`, read from the store (verified like every blob) and
rendered as Markdown for the commit page.

PEFT's `save_pretrained` writes the Hub's model card template with about forty sections left
as "[More Information Needed]": those placeholders, and the sections that hold nothing else,
are left out and counted, so a card that says nothing shows as one line, not a page of it.

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
# What the Hub's template writes for a field nobody filled in.
PLACEHOLDER = "[More Information Needed]"
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# A list item's marker and a bold label ("- **License:** ..."), before a field's value.
_LABEL = re.compile(r"^(?:[-*+][ \t]+)?(?:\*\*[^*]*\*\*:?)?[ \t]*")
_DEFAULT = re.compile(r'default\("([^"]*)"')
# The section PEFT adds to the template, filled in by PEFT itself: not the author's words.
PEFT_OWN = "Framework versions"


@dataclass(frozen=True)
class Card:
    path: str
    html: str  # rendered by markdown-it with raw HTML off: safe to put in the page as is
    front: str  # the YAML front matter as text ('' without one)
    size: int  # of the whole file
    cut: bool  # the file is larger than LIMIT: only its first LIMIT bytes are rendered
    empty: int = 0  # sections of the Hub's template left empty: not shown
    filled: bool = True  # it says something beyond the template (the page opens it)
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
    html, front, _, _ = _rendered(text)
    return html, front


def _rendered(text: str) -> tuple[str, str, int, bool]:
    """TEXT's Markdown as HTML, its front matter, the template's empty sections left out, and
    whether it says anything beyond the template."""
    front = _FRONT.match(text)
    body = _COMMENT.sub("", text[front.end() :] if front else text)
    body, empty, filled = without_template(body)
    return markdown().render(body), front.group(1) if front else "", empty, filled


@functools.cache
def _template_lines() -> frozenset[str]:
    """The lines the Hub's model card template (huggingface_hub's, which PEFT fills in)
    writes whatever the model: its fixed sentences and the defaults of its fields."""
    from huggingface_hub.repocard import TEMPLATE_MODELCARD_PATH

    text = _COMMENT.sub("", TEMPLATE_MODELCARD_PATH.read_text(encoding="utf-8"))
    fixed = {line.strip() for line in text.splitlines() if "{" not in line}
    return frozenset(fixed | set(_DEFAULT.findall(text))) - {""}


def _value(line: str) -> str:
    """A line's text past a list marker and a bold label: a field's value."""
    return _LABEL.sub("", line.strip(), count=1).strip()


def _says_nothing(line: str, code: bool) -> bool:
    """LINE (CODE: in a fenced block) is blank, a placeholder, or the template's own text."""
    return not code and (_value(line) in ("", PLACEHOLDER) or line.strip() in _template_lines())


def _sections(body: str) -> list[tuple[int, str, list[tuple[str, bool]]]]:
    """BODY cut at its headings: (level, title, [(line, in a code block)]), the heading's own
    line first; level 0 is the text before the first heading."""
    out: list = [(0, "", [])]
    fence = None
    for line in body.splitlines():
        opening = _FENCE.match(line)
        heading = None if fence else _HEADING.match(line)
        if heading:
            out.append((len(heading.group(1)), (heading.group(2) or "").strip("# \t"), []))
        out[-1][2].append((line, fence is not None or opening is not None))
        if opening and (fence is None or opening.group(1).startswith(fence)):
            fence = None if fence else opening.group(1)
    return out


def without_template(body: str) -> tuple[str, int, bool]:
    """BODY (Markdown, its HTML comments removed) without what the Hub's template says when
    nobody filled it in: each "[More Information Needed]" line, and each section holding
    nothing else (kept when a subsection holds something of the author's). Returns (the
    Markdown, how many sections were left out, whether anything beyond the template and
    PEFT's framework versions is there). A card without a placeholder is no template's: it
    is returned as it is."""
    if PLACEHOLDER not in body:
        return body, 0, bool(body.strip())
    sections = _sections(body)
    kept, stack, filled = [False] * len(sections), [], False
    for i, (level, title, lines) in enumerate(sections):
        while stack and sections[stack[-1]][0] >= level:
            stack.pop()
        own = lines[1:] if level else lines
        if any(not _says_nothing(line, code) for line, code in own):
            kept[i] = True
            if title != PEFT_OWN:  # PEFT appends its section under the template's last one
                for j in stack:  # the headings above it stay, to say where it is
                    kept[j] = True
                filled = True
        if level:
            stack.append(i)
    out = [
        line
        for i, (_, _, lines) in enumerate(sections)
        if kept[i]
        for line, code in lines
        if code or _value(line) != PLACEHOLDER
    ]
    left_out = sum(1 for i, (level, _, _) in enumerate(sections) if level and not kept[i])
    return "\n".join(out) + "\n", left_out, filled


def card_of(store: ObjectStore, files: dict) -> Card | None:
    """The model card of a commit whose files are FILES (None: it has no README.md)."""
    entry = files.get(CARD)
    return None if entry is None else _card(store, entry.sha256, entry.size)


# A blob never changes: its card is rendered once (markdown-it is pure Python: seconds for a
# dense 256 KiB file on a busy 2-core machine) and kept for the next views.
@functools.lru_cache(maxsize=64)
def _card(store: ObjectStore, blob: str, size: int) -> Card:
    text, cut = read_text(store, blob, LIMIT)
    html, front, empty, filled = _rendered(text)
    return Card(CARD, html, front, size, cut, empty, filled)
