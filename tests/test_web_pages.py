"""What the pages say to a release owner, in a real browser (Debian's Chromium) against a real
`mint registry serve`, on SQLite and on PostgreSQL: times relative with the exact UTC time on
hover, commit ids with their message, author and tags, a commit's model card rendered from a
hostile README.md with nothing of it executed, forced moves with every check that failed (an
adapter's and a set's), a set's diff in members, labels and prompts, and error pages in words.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from mint import api
from mint.registry.web.card import markdown, safe_link, without_template
from mint.registry.web.render import ago, utc

from support.browser import chromium, sign_in, wait_for
from support.pgdb import pg_database
from support.registry import Registry, create_token, start_registry
from support.texts import MACARON_BY_REFS

pytestmark = [
    pytest.mark.xdist_group("web-pages"),
    pytest.mark.one_database(
        "postgresql",
        "the pages read through the API's functions, which test_gates and test_history run on"
        " both databases",
    ),
]

# A model card that tries everything a README can: a script, an image whose error handler
# runs script, raw HTML, a javascript: link, an autolink to one, and a data: link.
HOSTILE = """---
license: apache-2.0
tags:
- lora
---
# Chat adapter

<!-- a comment PEFT's template is full of -->
<script>window.pwned = 1; alert("script")</script>

<img src="x" onerror="window.pwned = 2; alert('img')">

<b>not bold</b> and **bold**

- [a javascript link](javascript:window.pwned=3)
- [a data link](data:text/html,<script>alert(4)</script>)
- <javascript:alert(5)>
- [the docs](https://example.org/docs) and [a relative one](notes.md)

```
<script>in a code block</script>
```
"""
PEFT_SECTION = "\n### Framework versions\n\n- PEFT 0.22.0\n"  # what PEFT adds to the card
BIG_CARD = "# Big\n\n" + "lorem ipsum dolor sit amet\n" * 12_000 + "\nTHE END OF THE CARD\n"

# The production channel needs accuracy >= 0.5, one approval, and to have held staging.
GUARDED = """
name = "production"
channel = "production"
requires = ["staging"]
approvals = 1
[[metric]]
name = "accuracy"
min = 0.5
"""
MACARON_V2 = (
    MACARON_BY_REFS.replace('labels = ["chat", "coding"]', 'labels = ["chat", "coding", "math"]')
    .replace('chat = "chat@production"', 'chat = "chat@v1"')
    .replace('coding = "coding"', 'coding = "coding"\nmath = "coding"')
)


@dataclass
class Site:
    repo: object
    server: Registry
    tokens: dict[str, str]
    ids: dict[str, str]
    browser: object = None
    clients: dict = field(default_factory=dict)

    def open(self, path: str, who: str = "maint"):
        if self.clients.get("signed-in") != who:
            sign_in(self.browser, self.server.url, self.tokens[who])
            self.clients["signed-in"] = who
        self.browser.get(self.server.url + path)
        return self.browser

    def get(self, path: str, who: str = "maint") -> httpx.Response:
        cookies = {"mint_session": self.tokens[who]}
        with httpx.Client(base_url=self.server.url, cookies=cookies) as c:
            return c.get(path)


def with_card(adapter: Path, dest: Path, card: str, revision: str) -> Path:
    """A copy of ADAPTER with CARD as its README.md (and a config of its own)."""
    shutil.copytree(adapter, dest)
    (dest / "README.md").write_text(card)
    config = (dest / "adapter_config.json").read_text()
    (dest / "adapter_config.json").write_text(
        config.replace("{", f'{{"revision": "{revision}", ', 1)
    )
    return dest


def prepare(repo, models, folder: Path) -> dict[str, str]:
    """chat c1 (the hostile card, tagged v1) and c2 (a card over the limit, tagged v2), forced
    onto chat@production past two of its three checks (it has its approval); two versions of
    the set macaron, the second forced onto macaron@production with no evaluation."""
    api.base_add(repo, "tiny-llama", models["base"])
    c1 = with_card(models["a1"], folder / "c1", HOSTILE, "c1")
    c2 = with_card(models["a2"], folder / "c2", BIG_CARD, "c2")
    ids = {
        "c1": api.commit(repo, "chat", c1, "first\n\nthe body", author="alice").id,
        "c2": api.commit(repo, "chat", c2, "second: smaller steps", author="bob").id,
        "coding": api.commit(repo, "coding", models["a3"], "coder", author="bob").id,
        "router": api.commit(repo, "router", models["a1"], "router", author="alice").id,
    }
    damaged = with_card(models["a1"], folder / "damaged", "# A card to damage\n", "damaged")
    ids["damaged"] = api.commit(repo, "damaged", damaged, "its card is damaged", author="eve").id
    api.tag(repo, "chat@v1", ids["c1"], by="alice")
    api.tag(repo, "chat@v2", ids["c2"], by="alice")
    api.tag(repo, "router@v1", ids["router"], by="alice")
    api.promote(repo, ids["c1"], "production", by="alice", create=True)  # before the contract
    (folder / "production.toml").write_text(GUARDED)
    api.contract_add(repo, folder / "production.toml", by="admin")
    api.record_evaluation(
        repo, ids["c2"], "production", {"accuracy": 0.3}, source="manual", by="evaluator"
    )
    api.approve(repo, ids["c2"], "production", by="dave")
    api.promote(repo, ids["c2"], "production", by="carol", force=True, reason="hotfix now")
    mol = folder / "macaron"
    mol.mkdir()
    (mol / "mol.toml").write_text(MACARON_BY_REFS)
    (mol / "route.md").write_text("Route the request to one expert.\n")
    (mol / "summary.md").write_text("Summarise the turn.\n")
    ids["set1"] = api.set_commit(repo, mol / "mol.toml", "the set", author="alice").id
    (mol / "mol.toml").write_text(MACARON_V2)
    (mol / "route.md").write_text("Route the request to one expert, or to math.\n")
    ids["set2"] = api.set_commit(repo, mol / "mol.toml", "math joins", author="dave").id
    api.promote(repo, ids["set2"], "production", by="carol", force=True, reason="set forced")
    return ids


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(request, tmp_path_factory, models):
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"web-pages-{request.param}")
        repo, _ = api.init(folder / "repo", url)
        stack.callback(repo.close)
        ids = prepare(repo, models, folder)
        tokens = {
            "maint": create_token(repo.root, "maint", "maintainer"),
            "coder": create_token(repo.root, "coder", "reader", ("coding",)),
        }
        server = start_registry(repo.root)
        stack.callback(server.stop)
        s = Site(repo, server, tokens, ids)
        s.browser = chromium(Path(tempfile.mkdtemp(prefix="chromium-", dir=folder)))
        stack.callback(s.browser.quit)
        yield s


def texts(browser, css: str) -> list[str]:
    return [e.text for e in browser.find_elements("css selector", css)]


# --- the model card --------------------------------------------------------------------


def test_a_hostile_model_card_shows_as_text_and_runs_nothing(site):
    from selenium.common.exceptions import NoAlertPresentException

    b = site.open(f"/commit/{site.ids['c1']}")
    card = b.find_element("id", "card-body")
    assert card.find_element("css selector", "h1").text == "Chat adapter"
    assert card.find_element("css selector", "strong").text == "bold"
    # Raw HTML is text: the characters show, no element is made of them.
    shown = card.text
    assert '<script>window.pwned = 1; alert("script")</script>' in shown
    assert '<img src="x" onerror="window.pwned = 2; alert(\'img\')">' in shown
    assert "<b>not bold</b>" in shown and "a comment PEFT" not in shown
    assert b.find_elements("css selector", "script, #card-body img, #card-body b") == []
    # Only http(s) and relative links are links; the others are text.
    links = {a.text: a.get_attribute("href") for a in card.find_elements("css selector", "a")}
    assert links == {
        "the docs": "https://example.org/docs",
        "a relative one": site.server.url + "/commit/notes.md",
    }
    assert "javascript:" in shown and "data:text/html" in shown
    assert all(
        a.get_attribute("rel") == "nofollow noopener noreferrer"
        for a in card.find_elements("css selector", "a")
    )
    assert "license: apache-2.0" in b.find_element("id", "card-front").text
    assert b.execute_script("return window.pwned === undefined")
    with pytest.raises(NoAlertPresentException):
        b.switch_to.alert.text  # noqa: B018


def test_a_model_card_over_the_limit_is_cut_and_says_so(site):
    b = site.open(f"/commit/{site.ids['c2']}")
    assert "only its first 256.0 KiB" in b.find_element("id", "card-cut").text
    body = b.find_element("id", "card-body").text
    assert body.startswith("Big") and "THE END OF THE CARD" not in body


def test_a_damaged_model_card_is_an_error_not_a_page(site):
    cid = site.ids["damaged"]
    blob = site.repo.store.local_path(api.show(site.repo, cid).files["README.md"].sha256)
    blob.chmod(0o644)
    blob.write_text("# Tampered\n")
    answer = site.get(f"/commit/{cid}")
    assert answer.status_code == 500 and "is corrupt" in answer.text
    assert "Tampered" not in answer.text and "A card to damage" not in answer.text


def test_a_commit_without_a_readme_has_no_card(site):
    b = site.open(f"/commit/{site.ids['set1']}")
    assert b.find_element("id", "commit-id").text == site.ids["set1"]
    assert b.find_elements("id", "card") == []


# --- times and commit ids --------------------------------------------------------------


def test_times_read_relative_with_the_exact_utc_time_on_hover(site):
    b = site.open("/line/chat")
    times = b.find_elements("css selector", "#log td.time time")
    assert len(times) == 2
    for t in times:
        assert re.fullmatch(r"just now|\d+ (second|minute|hour)s? ago", t.text), t.text
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", t.get_attribute("title"))
        assert t.get_attribute("datetime").startswith(t.get_attribute("title")[:10])


def test_commit_ids_come_with_their_message_author_and_tags(site):
    ids = site.ids
    b = site.open("/")
    head = b.find_element("css selector", "tr[data-line='chat'] td.head").text
    assert ids["c2"][:12] in head and "second: smaller steps" in head and "by bob" in head
    assert "v2" in head
    b = site.open(f"/commit/{ids['c2']}")
    parents = b.find_element("id", "parents").text
    assert ids["c1"][:12] in parents and "first" in parents and "the body" not in parents
    assert "by alice" in parents and "v1" in parents
    b = site.open(f"/diff?a={ids['c1']}&b={ids['c2']}")
    ends = b.find_element("css selector", ".diff-ends").text
    assert "first" in ends and "second: smaller steps" in ends


# --- channels: the holder and forced moves ---------------------------------------------


def test_the_holder_shows_its_message_evaluation_and_who_moved_it(site):
    b = site.open("/channel/chat@production")
    holder = b.find_element("id", "holder").text
    assert site.ids["c2"][:12] in holder and "second: smaller steps" in holder
    move = b.find_element("id", "holder-move")
    assert move.text.startswith("forced past the gate by carol ") and "hotfix now" in move.text
    assert move.find_element("css selector", "time").get_attribute("title").endswith(" UTC")
    assert "production v1" in holder and "accuracy 0.3" in holder
    failed = texts(b, "#holder .forced tbody tr")
    assert failed == ["accuracy >= 0.5 0.3 FAIL", "held chat@staging yes no FAIL"]
    assert "approved by dave " in holder


def test_a_forced_move_shows_every_check_that_failed(site):
    b = site.open("/channel/chat@production")
    top = b.find_element("css selector", "#timeline li.move")
    forced = top.find_element("css selector", ".forced")
    assert forced.text.startswith("forced past the gate: 2 of 3 checks failed")
    rows = [r.text for r in forced.find_elements("css selector", "tbody tr")]
    assert rows == [
        "accuracy >= 0.5 0.3 FAIL",
        "held chat@staging yes no FAIL",
        "approvals >= 1 1 pass",
    ]
    assert len(forced.find_elements("css selector", "tbody tr.fail")) == 2
    assert "no contract guarded" not in top.text
    # The promote before the contract existed was guarded by none, and says so.
    first = b.find_elements("css selector", "#timeline li.move")[-1]
    assert "no contract guarded the move" in first.text
    with site.server.client(site.tokens["maint"]) as c:
        view = c.get("/api/v1/channel", params={"ref": "chat@production"}).json()
    gate = view["moves"][0]["gate"]
    assert [(c["check"], c["ok"]) for c in gate] == [
        ("held chat@staging", False),
        ("approvals", True),
    ]


def test_a_set_forced_onto_a_guarded_channel_names_the_contract(site):
    b = site.open("/channel/macaron@production")
    top = b.find_element("css selector", "#timeline li.move")
    assert "no contract guarded" not in b.find_element("tag name", "main").text
    rows = [r.text for r in top.find_elements("css selector", ".forced tbody tr.fail")]
    assert rows[0] == "evaluation under production v1 recorded none FAIL"
    assert "accuracy >= 0.5 - FAIL" in rows and "approvals >= 1 0 FAIL" in rows
    assert "held macaron@staging yes no FAIL" in rows


# --- a set's diff ----------------------------------------------------------------------


def test_a_sets_diff_shows_members_labels_and_prompts(site):
    ids = site.ids
    b = site.open(f"/diff?a={ids['set1']}&b={ids['set2']}")
    members = {
        r.get_attribute("data-member"): r.text
        for r in b.find_elements("css selector", "#members tbody tr")
    }
    assert sorted(members) == ["expert:chat", "expert:math"]
    chat = members["expert:chat"]
    assert chat.index(ids["c2"][:12]) < chat.index(ids["c1"][:12]) and "first" in chat
    assert (
        "not in the set" in members["expert:math"] and ids["coding"][:12] in members["expert:math"]
    )
    assert texts(b, "#labels li") == ["+ label math added"]
    prompt = b.find_element("css selector", "pre[data-prompt='route.md']").text
    assert "-Route the request to one expert." in prompt
    assert "+Route the request to one expert, or to math." in prompt
    page = b.find_element("tag name", "main").text
    assert "Tensors" not in page and "{'" not in page and "no tensor changed" not in page


# --- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/line/nope", 404, "no line named 'nope'"),
        ("/line/chat?after=1234567", 404, "no commit 1234567 in line chat"),
        ("/commit/1234567", 404, "no commit, line, tag or channel named '1234567'"),
        ("/channel/chat@nope", 404, "no channel named 'nope' on line chat"),
        ("/diff?a=chat&b=chat@nope", 404, "no tag or channel 'nope'"),
    ],
)
def test_error_pages_say_what_is_missing_in_words(site, path, status, words):
    answer = site.get(path)
    assert answer.status_code == status, answer.text
    error = re.search(r'<p class="error" id="error">([^<]*)</p>', answer.text)
    assert error and words in error.group(1).replace("&#39;", "'"), answer.text
    assert "\n" not in error.group(1) and "NotFound" not in answer.text


def test_a_forbidden_page_and_a_bad_form_say_why_in_one_line(site):
    answer = site.get("/line/chat", who="coder")
    assert answer.status_code == 403 and "Not allowed" in answer.text
    assert "Forbidden" not in answer.text and "chat" in answer.text
    b = site.open("/", who="maint")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', b.page_source).group(1)
    fields = {"csrf": csrf} | {f"f{i}": "x" for i in range(60)}
    with httpx.Client(
        base_url=site.server.url, cookies={"mint_session": site.tokens["maint"]}
    ) as c:
        answer = c.post("/approve", data=fields)
    assert answer.status_code == 400 and "over 50 fields" in answer.text
    assert "InvalidForm" not in answer.text
    wait_for(b, lambda: b.find_element("id", "who"))


# --- the pieces, without a browser -----------------------------------------------------


def test_ago_reads_a_time_as_a_person_would():
    now = dt.datetime(2026, 12, 3, 22, 0, tzinfo=dt.UTC)
    cases = {
        5: "just now",
        200: "3 minutes ago",
        3600: "1 hour ago",
        7200: "2 hours ago",
        3 * 86400: "3 days ago",
        90 * 86400: "3 months ago",
        800 * 86400: "2 years ago",
        -120: "in 2 minutes",
    }
    for seconds, words in cases.items():
        assert ago((now - dt.timedelta(seconds=seconds)).isoformat(), now) == words
    assert utc("2026-12-03T21:43:45.123+00:00") == "2026-12-03 21:43:45 UTC"
    assert utc("2026-12-03T23:43:45+02:00") == "2026-12-03 21:43:45 UTC"


def test_only_http_https_and_relative_links_are_links():
    for url in ("https://x.org", "HTTP://x.org", "notes.md", "/commit/abc", "#usage", "?q=1"):
        assert safe_link(url), url
    for url in (
        "javascript:alert(1)",
        " JavaScript:x",
        "data:text/html,x",
        "vbscript:x",
        "file:///x",
    ):
        assert not safe_link(url), url


def test_a_filled_in_template_keeps_the_authors_words_and_drops_the_placeholders():
    from huggingface_hub import ModelCard, ModelCardData

    def card(**fields) -> str:
        """The Hub's template as PEFT's save_pretrained fills it, as the page reads it (its
        comments left out), with PEFT's own section at the end."""
        text = ModelCard.from_template(ModelCardData(), **fields).text
        return re.sub(r"<!--.*?-->", "", text, flags=re.S) + PEFT_SECTION

    written = card(
        developers="alice",
        training_data="support tickets of March",
        get_started_code="```\n[More Information Needed]\n```",
    )
    body, empty, filled = without_template(written)
    assert filled and empty > 20 and "[More Information Needed]" in written
    lines = [x for x in body.splitlines() if x.strip()]
    assert "- **Developed by:** alice" in lines and "support tickets of March" in lines
    assert "### Training Data" in lines and "## Training Details" in lines  # its headings
    assert "- **License:** [More Information Needed]" not in body and "## Uses" not in lines
    assert "```\n[More Information Needed]\n```" in body  # a code block is the author's
    assert lines[-2:] == ["### Framework versions", "- PEFT 0.22.0"]
    # PEFT's own section alone says nothing of the adapter: the card stays closed.
    body, empty, filled = without_template(card())
    assert not filled and empty > 30
    assert [x for x in body.splitlines() if x.strip()] == lines[-2:]
    # A card of its own, without the template's placeholder, is left as it is.
    assert without_template(HOSTILE) == (HOSTILE, 0, True)


def test_a_model_card_keeps_the_hubs_tables_and_escapes_what_is_in_them():
    html = markdown().render("| metric | value |\n|---|---|\n| acc | <b onclick=x>0.9</b> |\n")
    assert "<th>metric</th>" in html and "<td>acc</td>" in html
    assert "&lt;b onclick=x&gt;0.9&lt;/b&gt;" in html and "<b " not in html
