"""The registry's web pages in a real browser: Debian's Chromium driven by Selenium against a
real `mint registry serve` process, on SQLite and on PostgreSQL.

The module prepares a registry (adapter lines, a set, a tag, contracts, evaluations, a
channel with promotions and a rollback), opens every page and reads what it shows, signs in
as a maintainer and acts through the forms, and checks the results through the JSON API.
A screenshot of each page is saved under the module's temporary folder (`screens/`).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from mint import api
from mint.cli import run_in_process

from support.browser import chromium, wait_for
from support.pgdb import pg_database
from support.registry import Registry, create_token, start_registry
from support.texts import MACARON_BY_REFS, PRODUCTION_ACCURACY, RELEASE_ACCURACY

pytestmark = [
    pytest.mark.xdist_group("web"),
    pytest.mark.one_database(
        "postgresql",
        "the pages read through the API's functions, which test_gates and test_history run on"
        " both databases",
    ),
]

LONG = 53  # commits on the line `long`: a page of 50 and one of 3
SCRIPT_MESSAGE = 'first <script>alert("x")</script> & <b>bold</b>'


PROVENANCE = {"source": "hf", "repo": "acme/chat-lora", "revision": "v2", "sha": "ab" * 20}


@dataclass
class Site:
    root: Path
    server: Registry
    tokens: dict[str, str]
    ids: dict[str, str]
    screens: Path
    browser: object = None
    clients: dict = field(default_factory=dict)

    def api(self, who: str = "maint") -> httpx.Client:
        """The JSON API as token WHO."""
        if who not in self.clients:
            self.clients[who] = self.server.client(self.tokens[who])
        return self.clients[who]

    def open(self, path: str):
        self.browser.get(self.server.url + path)
        return self.browser

    def shot(self, name: str) -> None:
        self.browser.save_screenshot(str(self.screens / f"{name}.png"))

    def sign_in(self, who: str) -> None:
        """Sign out (forget the cookie), then sign in through the form as token WHO."""
        b = self.browser
        b.delete_all_cookies()
        self.open("/signin")
        b.find_element("id", "token").send_keys(self.tokens[who])
        b.find_element("id", "signin").click()
        wait_for(b, lambda: b.find_element("id", "who").text.startswith(who))


def variant(adapter: Path, dest: Path, tag: str) -> Path:
    """A copy of ADAPTER whose config differs, so that its commit is a new one."""
    shutil.copytree(adapter, dest)
    config = json.loads((dest / "adapter_config.json").read_text())
    config["revision"] = tag
    (dest / "adapter_config.json").write_text(json.dumps(config))
    return dest


def prepare(repo, models, folder: Path) -> dict[str, str]:
    """Lines chat (three commits), coding, router and the set macaron (and a set derived
    from it); chat@v1; contracts; evaluations; chat@production promoted twice (the second
    approved by dave) and rolled back once."""
    api.base_add(repo, "tiny-llama", models["base"])
    dataset = api.traces_export(repo, folder / "traces.jsonl", by="alice")  # (no traces yet)
    meta = {"data": dataset.id, "lr": 0.001, "steps": 40}
    ids = {"c1": api.commit(repo, "chat", models["a1"], SCRIPT_MESSAGE, author="alice", meta=meta)}
    ids["c2"] = api.commit(
        repo, "chat", models["a2"], "second", author="bob", provenance=PROVENANCE
    )
    ids["c3"] = api.commit(
        repo, "chat", variant(models["a2"], folder / "v3", "r3"), "third", author="carol"
    )
    ids["coding"] = api.commit(repo, "coding", models["a3"], "coder", author="bob")
    ids["router"] = api.commit(repo, "router", models["a1"], "router", author="alice")
    ids = {k: v.id for k, v in ids.items()} | {"dataset": dataset.id}
    api.tag(repo, "chat@v1", ids["c1"], by="alice", message="the first")
    api.tag(repo, "router@v1", ids["router"], by="alice")
    for name, text in (("production", PRODUCTION_ACCURACY), ("release", RELEASE_ACCURACY)):
        (folder / f"{name}.toml").write_text(text)
        api.contract_add(repo, folder / f"{name}.toml", by="admin")
    for key, accuracy in (("c1", 0.71), ("c2", 5 / 6), ("c3", 0.9)):
        api.record_evaluation(
            repo, ids[key], "production", {"accuracy": accuracy}, source="manual", by="evaluator"
        )
    api.record_evaluation(
        repo, ids["c2"], "release", {"accuracy": 0.8}, source="manual", by="evaluator"
    )
    api.promote(repo, ids["c1"], "production", by="alice")
    api.approve(repo, ids["c2"], "production", by="dave")  # used by the promote below
    api.promote(repo, ids["c2"], "production", by="alice", reason="better accuracy")
    api.rollback(repo, "chat@production", by="bob", reason="complaints about tone")
    mol = folder / "macaron"
    mol.mkdir()
    (mol / "mol.toml").write_text(MACARON_BY_REFS)
    (mol / "route.md").write_text("Route the request to one expert.\n")
    (mol / "summary.md").write_text("Summarise the turn.\n")
    ids["set"] = api.set_commit(repo, mol / "mol.toml", "the set", author="alice").id
    ids["derived"] = api.set_derive(repo, ids["set"], {"chat": ids["c2"]}, author="bob").id
    long = variant(models["a1"], folder / "long", "r0")
    for step in range(LONG):  # more commits than a page of a line holds
        config = json.loads((long / "adapter_config.json").read_text())
        (long / "adapter_config.json").write_text(json.dumps({**config, "revision": f"s{step}"}))
        api.commit(repo, "long", long, f"step {step}", author="dave")
    return ids


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(request, tmp_path_factory, models):
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"web-{request.param}")
        repo, _ = api.init(folder / "repo", url)
        stack.callback(repo.close)
        ids = prepare(repo, models, folder)
        tokens = {
            n: create_token(repo.root, n, role)
            for n, role in (("maint", "maintainer"), ("reader", "reader"))
        }
        server = start_registry(repo.root)
        stack.callback(server.stop)
        screens = folder / "screens"
        screens.mkdir()
        s = Site(repo.root, server, tokens, ids, screens)
        stack.callback(lambda: [c.close() for c in s.clients.values()])
        profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=folder))
        s.browser = chromium(profile)
        stack.callback(s.browser.quit)
        yield s


def texts(browser, css: str) -> list[str]:
    return [e.text for e in browser.find_elements("css selector", css)]


def holder(site: Site, ref: str = "chat@production") -> dict:
    return site.api().get("/api/v1/history", params={"ref": ref}).json()[-1]


# --- pages ------------------------------------------------------------------------------


def test_a_page_needs_a_session_and_sign_in_refuses_a_wrong_token(site):
    b = site.browser
    b.delete_all_cookies()
    site.open("/line/chat")
    assert "/signin" in b.current_url
    b.find_element("id", "token").send_keys("mint_not-a-token")
    b.find_element("id", "signin").click()
    # The click returns before the answer's page is there: wait for it, then read it.
    wait_for(b, lambda: "unknown or revoked" in b.find_element("id", "error").text)
    b.find_element("id", "token").send_keys(site.tokens["maint"])
    b.find_element("id", "signin").click()
    wait_for(b, lambda: b.find_element("id", "who").text.startswith("maint"))
    cookie = b.get_cookie("mint_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["value"] == site.tokens["maint"]


def test_lines_page_shows_kinds_heads_tags_holders_and_filters_without_script(site):
    site.sign_in("maint")
    b = site.open("/")
    rows = {
        r.get_attribute("data-line"): r for r in b.find_elements("css selector", "#lines tbody tr")
    }
    assert sorted(rows) == ["chat", "coding", "long", "macaron", "router"]
    chat = rows["chat"].text
    assert site.ids["c3"][:12] in chat and "v1" in chat and "production" in chat
    assert site.ids["c1"][:12] in chat  # the holder after the rollback
    assert "SET" in rows["macaron"].text.upper()
    site.shot("lines")
    b.find_element("id", "q").send_keys("cod")
    b.find_element("id", "filter").click()
    wait_for(b, lambda: "q=cod" in b.current_url)
    assert texts(b, "#lines tbody td.name") == ["coding"]


def test_line_page_lists_commits_newest_first_with_badges_and_lineage(site):
    site.sign_in("maint")
    b = site.open("/line/chat")
    ids = site.ids
    rows = b.find_elements("css selector", "#log tbody tr")
    assert [r.get_attribute("data-commit") for r in rows] == [ids["c3"], ids["c2"], ids["c1"]]
    assert texts(b, "#log td.author") == ["carol", "bob", "alice"]
    assert "v1" in rows[2].text and "production" in rows[2].text
    assert "production" not in rows[0].text
    # The message is text, escaped: no script element, no <b> element, the characters shown.
    assert texts(b, "#log td.message")[2] == SCRIPT_MESSAGE
    assert b.find_elements("css selector", "script") == []
    assert b.find_elements("css selector", "#log b") == []
    svg = b.find_element("id", "lineage")
    assert len(svg.find_elements("css selector", "circle")) == 3
    assert len(svg.find_elements("css selector", "line")) == 2  # c3 -> c2 -> c1
    site.shot("line")


def test_a_line_pages_its_commits_and_draws_edges_off_the_page(site):
    site.sign_in("maint")
    log = site.api().get("/api/v1/log", params={"rev": "long"}).json()
    assert len(log) == LONG
    b = site.open("/line/long")
    first = [
        r.get_attribute("data-commit") for r in b.find_elements("css selector", "#log tbody tr")
    ]
    assert first == [c["id"] for c in log[:50]]
    assert len(b.find_elements("css selector", "#lineage line.off")) == 1
    b.find_element("id", "older").click()
    wait_for(b, lambda: "after=" in b.current_url)
    second = [
        r.get_attribute("data-commit") for r in b.find_elements("css selector", "#log tbody tr")
    ]
    assert second == [c["id"] for c in log[50:]] and second[0] == log[49]["parents"][0]
    assert b.find_elements("id", "older") == [] and b.find_element("id", "newest")
    assert b.find_elements("css selector", "#lineage line.off") == []


def test_commit_page_shows_files_peft_provenance_meta_and_evaluations(site):
    site.sign_in("maint")
    cid = site.ids["c1"]
    detail = site.api().get(f"/api/v1/commits/{cid}").json()
    b = site.open(f"/commit/{cid}")
    assert b.find_element("id", "commit-id").text == cid
    assert b.find_element("id", "message").text == SCRIPT_MESSAGE
    assert b.find_elements("css selector", "script") == []
    files = b.find_element("id", "files").text
    for path, f in detail["files"].items():
        assert path in files and f["sha256"] in files
    assert "tiny-llama" in b.find_element("id", "base").text
    peft = b.find_element("id", "peft").text
    assert str(detail["peft"]["r"]) in peft
    meta = b.find_element("id", "meta").text
    assert site.ids["dataset"] in meta and "0.001" in meta and "chat export, 0 records" in meta
    link = b.find_element("id", "dataset").get_attribute("href")
    assert link.endswith(f"/api/v1/datasets/{site.ids['dataset']}")
    dataset = site.api("reader").get(link)
    assert dataset.status_code == 200 and dataset.json()["id"] == site.ids["dataset"]
    unknown = site.api("reader").get(f"/api/v1/datasets/{'0' * 64}")
    assert unknown.status_code == 404, unknown.text
    evaluation = b.find_element("css selector", ".evaluation").text
    assert "production v1" in evaluation and "0.71" in evaluation
    assert "v1" in b.find_element("css selector", "p.meta").text
    site.shot("commit")
    b = site.open(f"/commit/{site.ids['c2']}")
    provenance = b.find_element("id", "provenance").text
    assert all(str(v) in provenance for v in PROVENANCE.values()), provenance


def test_commit_page_puts_the_facts_before_pefts_empty_model_card(site):
    """c1's README.md is the card PEFT's save_pretrained wrote: the Hub's template with
    every field "[More Information Needed]"."""
    site.sign_in("maint")
    b = site.open(f"/commit/{site.ids['c1']}")
    card, files = b.find_element("id", "card"), b.find_element("id", "files")
    for fact in ("files", "peft", "meta"):  # above the card, on the first screen
        y = b.find_element("id", fact).location["y"]
        assert y < card.location["y"] and y < b.get_window_size()["height"], fact
    assert b.find_element("css selector", ".evaluation").location["y"] < card.location["y"]
    assert "More Information Needed" not in b.page_source
    summary = b.find_element("id", "card-summary").text
    assert "the Hub's card template, not filled in" in summary, summary
    assert int(re.search(r"\((\d+) empty sections of the template", summary).group(1)) > 20
    assert card.get_attribute("open") is None and not b.find_element("id", "card-body").text
    card.find_element("tag name", "summary").click()  # opens without script
    wait_for(b, lambda: "Framework versions" in b.find_element("id", "card-body").text)
    body = b.find_element("id", "card-body").text
    assert "PEFT " in body and "Model Details" not in body and "Training Details" not in body
    assert "[" not in b.find_element("id", "peft").text  # target_modules as names, not a list
    assert texts(b, "p.meta .badge.tag") == ["v1"]  # the tag as the other pages name it
    assert files.location["y"] < card.location["y"]


def test_set_page_links_each_member(site):
    site.sign_in("maint")
    ids = site.ids
    b = site.open(f"/commit/{ids['set']}")
    members = b.find_element("id", "members")
    links = [a.get_attribute("href") for a in members.find_elements("css selector", "a")]
    assert sorted(link.rsplit("/", 1)[1] for link in links) == sorted(
        [ids["router"], ids["c1"], ids["coding"], ids["c3"]]
    )
    assert (
        "chat" in b.find_element("id", "set").text and "coding" in b.find_element("id", "set").text
    )
    assert "Route the request to one expert." in b.page_source
    # Each member once: in the members' table, not again in the set's.
    assert len(b.find_elements("css selector", "main a.id")) == len(links) == 4
    assert b.find_elements("css selector", "#set a") == []
    site.shot("set")
    members.find_elements("css selector", "a")[0].click()
    wait_for(b, lambda: "/commit/" in b.current_url and b.find_element("id", "commit-id").text)


def test_a_derived_sets_provenance_reads_as_commits_not_a_dict(site):
    site.sign_in("maint")
    ids = site.ids
    b = site.open(f"/commit/{ids['derived']}")
    provenance = b.find_element("id", "provenance")
    assert "{" not in provenance.text and "'" not in provenance.text, provenance.text
    rows = {
        r.find_element("tag name", "th").text: r
        for r in provenance.find_elements("css selector", ":scope > tbody > tr")
    }
    assert sorted(rows) == ["derived_from", "uses"]
    assert "the set" in rows["derived_from"].text and "by alice" in rows["derived_from"].text
    link = rows["derived_from"].find_element("css selector", "a.id").get_attribute("href")
    assert link.endswith(f"/commit/{ids['set']}")
    uses = rows["uses"].find_element("css selector", "table")
    assert uses.find_element("tag name", "th").text == "chat"
    assert uses.find_element("css selector", "a.id").get_attribute("href").endswith(ids["c2"])
    assert "second" in uses.text
    # The chat member pinned by its id reads as the short id, as the commit beside it does.
    chat = b.find_element("css selector", "#members").text.splitlines()[2]
    assert ids["c2"] not in chat and chat.count(ids["c2"][:12]) == 2, chat


def test_diff_page_lists_changed_tensors_and_sorts_by_delta(site):
    site.sign_in("maint")
    a, c = site.ids["c1"], site.ids["c2"]
    want = site.api().get("/api/v1/diff", params={"a": a, "b": c}).json()
    b = site.open(f"/diff?a={a}&b={c}")
    names = texts(b, "#changed td.tensor")
    assert names == sorted(t["name"] for t in want["tensors"]["changed"]) and names
    b.find_element("id", "sort-delta").click()
    wait_for(b, lambda: "sort=delta" in b.current_url)
    deltas = [float(x) for x in texts(b, "#changed td.delta")]
    assert deltas == sorted(deltas)
    b.find_element("id", "sort-delta").click()
    wait_for(b, lambda: "sort=-delta" in b.current_url)
    assert [float(x) for x in texts(b, "#changed td.delta")] == sorted(deltas, reverse=True)
    site.shot("diff")


def test_channel_page_shows_the_timeline_newest_first_with_evidence(site):
    site.sign_in("maint")
    ids = site.ids
    moves = site.api().get("/api/v1/history", params={"ref": "chat@production"}).json()
    b = site.open("/channel/chat@production")
    items = b.find_elements("css selector", "#timeline li.move")
    assert [int(i.get_attribute("data-move")) for i in items] == [m["id"] for m in moves][::-1]
    top = items[0]
    assert "ROLLBACK" in top.text.upper() and "bob" in top.text
    assert "complaints about tone" in top.text and "holds now" in top.text
    assert "better accuracy" in items[1].text and "production v1" in items[1].text
    assert ids["c1"][:12] in b.find_element("id", "holder").text
    assert ids["c3"][:12] in b.find_element("id", "candidate").text
    site.shot("channel")
    # The page's JSON twin answers the same view.
    view = site.api("reader").get("/api/v1/channel", params={"ref": "chat@production"}).json()
    assert [e["move"]["id"] for e in view["moves"]] == [m["id"] for m in moves][::-1]
    assert (view["holder"], view["head"], view["gate"]["ok"]) == (ids["c1"], ids["c3"], True)
    evidence = view["moves"][1]["evidence"][0]
    assert evidence["evaluation"]["contract"] == "production" and evidence["checks"][0]["ok"]
    # The holder's move in words: rolled back (to it), by whom.
    assert b.find_element("id", "holder-move").text.startswith("rolled back by bob ")
    # The contract the head is checked against leads to the line's evaluations under it.
    contract = b.find_element("css selector", "#candidate a.contract")
    assert contract.text == "production v1"
    contract.click()
    wait_for(b, lambda: b.find_element("id", "contract").text == "production")
    assert b.current_url.endswith("/evaluations/chat@production")


def test_a_metric_reads_the_same_in_the_evidence_line_and_beside_it(site):
    """c2's accuracy is 5/6: the evidence line, the gate's table and the commit page all
    show it rounded the one way the gate's table does."""
    site.sign_in("maint")
    b = site.open("/channel/chat@production")
    promoted = b.find_elements("css selector", "#timeline li.move")[1]
    line = promoted.find_element("css selector", ".evidence .metric").text
    row = promoted.find_element("css selector", "table.gate tbody tr").text
    assert line == "accuracy 0.833333" and row == "accuracy >= 0.5 0.833333 pass", (line, row)
    assert "0.8333333" not in b.page_source
    b = site.open(f"/commit/{site.ids['c2']}")
    shown = b.find_element("css selector", ".evaluation table.kv").text
    assert shown == "accuracy 0.833333" and "0.8333333" not in b.page_source


def test_pending_approvals_leave_out_used_ones_and_no_second_approval_is_offered(site):
    """dave's approval of c2 for production was used by c2's promote (c2 held the channel
    since): it is that move's evidence, not pending. Once maint approves the head, the
    pages say so instead of offering the button again."""
    site.sign_in("maint")
    ids = site.ids
    assert site.api().get("/api/v1/approvals", params={"ref": "chat@production"}).json() == []
    b = site.open("/channel/chat@production")
    assert texts(b, "#pending tbody tr") == ["none"]
    assert "approved by dave" in b.find_elements("css selector", "#timeline li.move")[1].text
    b.find_element("id", "approve").click()
    wait_for(b, lambda: b.find_element("id", "approved"))
    assert b.find_element("id", "approved").text.startswith(f"you approved {ids['c3'][:12]} ")
    assert b.find_elements("id", "approve") == []
    pending = texts(b, "#pending tbody tr")
    assert len(pending) == 1 and ids["c3"][:12] in pending[0] and " maint " in pending[0]
    b = site.open(f"/promote?rev={ids['c3']}&channel=production")
    assert b.find_elements("id", "approve") == []
    assert b.find_element("id", "approved").text.startswith("you approved it for production ")
    b = site.open(f"/promote?rev={ids['c3']}&channel=release")  # another channel: offered
    assert b.find_element("id", "approve") and b.find_elements("id", "approved") == []


# --- actions ----------------------------------------------------------------------------


def test_promote_then_roll_back_through_the_forms(site):
    site.sign_in("maint")
    ids = site.ids
    b = site.open("/channel/chat@production")
    b.find_element("id", "promote").click()
    wait_for(b, lambda: b.find_element("id", "verdict").text == "the gate passes")
    gate = b.find_element("id", "gate").text
    assert "accuracy" in gate and "0.9" in gate
    site.shot("promote")
    b.find_element("id", "reason").send_keys("third is best <i>really</i>")
    b.find_element("id", "confirm").click()
    wait_for(b, lambda: "/channel/chat@production" in b.current_url)
    moved = holder(site)
    assert (moved["to"], moved["by"], moved["action"]) == (ids["c3"], "maint", "promote")
    assert moved["reason"] == "third is best <i>really</i>"
    top = b.find_element("css selector", "#timeline li.move")
    assert "maint" in top.text and "third is best <i>really</i>" in top.text
    b.find_element("id", "rollback").click()
    wait_for(b, lambda: b.find_element("id", "rollback-form"))
    b.find_element("id", "reason").send_keys("latency regression")
    b.find_element("id", "confirm").click()
    wait_for(b, lambda: "/channel/chat@production" in b.current_url)
    back = holder(site)
    assert (back["to"], back["by"], back["action"]) == (ids["c1"], "maint", "rollback")
    assert back["reason"] == "latency regression"
    top = b.find_element("css selector", "#timeline li.move")
    assert "ROLLBACK" in top.text.upper() and "latency regression" in top.text
    site.shot("channel-after-rollback")


def test_approve_through_the_form_counts_for_the_gate(site):
    site.sign_in("maint")
    c2 = site.ids["c2"]
    b = site.open(f"/promote?rev={c2}&channel=release")
    assert "approvals" in b.find_element("id", "gate").text
    assert b.find_element("id", "verdict").text == "the gate refuses this commit"
    b.find_element("id", "approve").click()
    wait_for(b, lambda: b.find_element("id", "verdict").text == "the gate passes")
    pending = site.api().get("/api/v1/approvals", params={"ref": "chat@release"}).json()
    assert [(p["commit_id"], p["by"]) for p in pending] == [(c2, "maint")]
    # Promoted, the approval moves from pending to the move's evidence on the timeline.
    b.find_element("id", "reason").send_keys("approved and evaluated")
    b.find_element("id", "confirm").click()
    wait_for(b, lambda: "/channel/chat@release" in b.current_url)
    view = site.api("reader").get("/api/v1/channel", params={"ref": "chat@release"}).json()
    assert view["pending"] == [] and view["holder"] == c2
    assert [a["by"] for a in view["moves"][0]["approvals"]] == ["maint"]
    top = b.find_element("css selector", "#timeline li.move .approved")
    assert top.text.startswith("approved by maint ") and top.find_element("css selector", "time")


def csrf_of(site: Site, client: httpx.Client, path: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]*)"', client.get(path).text)
    assert found, "no form on the page"
    return found.group(1)


def test_forms_without_the_csrf_token_are_refused(site):
    before = holder(site)
    c2 = site.ids["c2"]
    with httpx.Client(
        base_url=site.server.url, cookies={"mint_session": site.tokens["maint"]}
    ) as c:
        good = csrf_of(site, c, "/channel/chat@production")
        for csrf in (None, "", "0" * 64):
            form = {"rev": c2, "channel": "production", "reason": "sneaky"}
            if csrf is not None:
                form["csrf"] = csrf
            answer = c.post("/promote", data=form)
            assert answer.status_code == 403, answer.text
            assert "CSRF" in answer.text
            answer = c.post(
                "/rollback",
                data={
                    "ref": "chat@production",
                    "reason": "x",
                    **({"csrf": csrf} if csrf is not None else {}),
                },
            )
            assert answer.status_code == 403
        assert good and holder(site) == before
    # Another token's CSRF value does not fit this session.
    with httpx.Client(
        base_url=site.server.url, cookies={"mint_session": site.tokens["reader"]}
    ) as r:
        other = csrf_of(site, r, "/channel/chat@production")
    assert other != good


def test_a_reader_sees_no_action_and_its_posts_are_refused(site):
    site.sign_in("reader")
    b = site.open("/channel/chat@production")
    assert b.find_elements("css selector", "#promote, #approve, #rollback, .action") == []
    site.shot("channel-reader")
    site.open(f"/commit/{site.ids['c2']}")
    assert b.find_elements("id", "promote-form") == []
    site.open(f"/promote?rev={site.ids['c2']}&channel=production")
    assert b.find_elements("id", "confirm") == [] and b.find_element("id", "gate")
    before = holder(site)
    with httpx.Client(
        base_url=site.server.url, cookies={"mint_session": site.tokens["reader"]}
    ) as c:
        csrf = csrf_of(site, c, "/channel/chat@production")  # the sign-out form's
        answer = c.post(
            "/promote", data={"csrf": csrf, "rev": site.ids["c2"], "channel": "production"}
        )
        assert answer.status_code == 403 and "maintainer" in answer.text
        answer = c.post(
            "/approve", data={"csrf": csrf, "rev": site.ids["c2"], "channel": "production"}
        )
        assert answer.status_code == 403
    assert holder(site) == before


def test_sign_out_forgets_the_session_and_a_revoked_token_is_signed_out(site):
    site.sign_in("maint")
    b = site.browser
    b.find_element("css selector", "header form button").click()
    wait_for(b, lambda: "/signin" in b.current_url)
    assert b.get_cookie("mint_session") is None
    site.open("/")
    assert "/signin" in b.current_url
    site.tokens["brief"] = create_token(site.root, "brief", "maintainer")
    site.sign_in("brief")
    assert (
        run_in_process(["--repo", str(site.root), "registry", "token", "revoke", "brief"])[0] == 0
    )
    site.open("/line/chat")
    assert "/signin" in b.current_url


def test_pages_are_not_in_the_openapi_schema_but_their_json_is(site):
    paths = site.api().get("/openapi.json").json()["paths"]
    pages = ("/", "/signin", "/signout", "/promote", "/rollback", "/approve", "/diff")
    assert not [
        p for p in paths if p in pages or p.startswith(("/line", "/commit", "/channel", "/static"))
    ]
    assert "/api/v1/approvals" in paths and "/api/v1/history" in paths
