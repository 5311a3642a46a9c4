"""The evaluations page in a real browser: a contract's metrics over a line's evaluated
commits (a table, and an SVG chart with the bounds and the channel holders), against a real
`mint registry serve` process on SQLite and on PostgreSQL; hostile addresses over plain HTTP.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from mint import api
from mint.registry.web import chart
from mint.registry.web.evaluations import evaluated

from support.browser import chromium, sign_in, wait_for
from support.pgdb import pg_database
from support.registry import Registry, create_token, start_registry

pytestmark = [
    pytest.mark.xdist_group("web-evaluations"),
    pytest.mark.one_database(
        "postgresql",
        "the page reads the evaluations the API reads, which test_gates and test_search run on"
        " both databases",
    ),
]

QUALITY = """
name = "quality"
channel = "production"
[[metric]]
name = "accuracy"
min = 0.5
[[metric]]
name = "latency_ms"
max = 200
"""
# A metric name holding markup: a contract's metric names are any text.
ODD = """
name = "odd"
channel = "staging"
[[metric]]
name = "<i>m</i>"
max = 1
"""
UNUSED = """
name = "unused"
channel = "canary"
[[metric]]
name = "score"
min = 0
"""
# accuracy, latency of chat's commits c0..c4 under quality; c2 is below the min; c5 has none.
SCORES = [(0.62, 150), (0.71, 140), (0.42, 120), (0.8, 190), (0.86, 230)]


@dataclass
class Site:
    server: Registry
    tokens: dict[str, str]
    ids: list[str]
    repo: object
    browser: object = None
    clients: dict = field(default_factory=dict)

    def page(self, path: str, who: str = "reader") -> httpx.Response:
        """PATH as a signed-in WHO would get it, over plain HTTP."""
        if who not in self.clients:
            cookies = {"mint_session": self.tokens[who]}
            self.clients[who] = httpx.Client(base_url=self.server.url, cookies=cookies)
        return self.clients[who].get(path)

    def open(self, path: str):
        self.browser.get(self.server.url + path)
        return self.browser


def commits(repo, adapter: Path, folder: Path, line: str, n: int, message: str) -> list[str]:
    """N commits on LINE, each a copy of ADAPTER with its own config revision."""
    work = folder / f"work-{line}"
    shutil.copytree(adapter, work)
    ids = []
    for i in range(n):
        config = json.loads((work / "adapter_config.json").read_text())
        (work / "adapter_config.json").write_text(json.dumps({**config, "revision": f"r{i}"}))
        ids.append(api.commit(repo, line, work, f"{message} {i}", author="alice").id)
    return ids


def prepare(repo, models, folder: Path) -> list[str]:
    """chat c0..c5 (c0..c4 evaluated under quality, c1 twice, c0 under odd), the line other
    (its first commit evaluated under odd, its head under quality),
    chat@production on c3 and chat@staging on c0, c2 tagged v3 and c4 v5; no evaluation
    under unused."""
    api.base_add(repo, "tiny-llama", models["base"])
    for name, text in (("quality", QUALITY), ("odd", ODD), ("unused", UNUSED)):
        (folder / f"{name}.toml").write_text(text)
        api.contract_add(repo, folder / f"{name}.toml", by="admin")
    ids = commits(repo, models["a1"], folder, "chat", 6, "step <b>")
    for cid, (accuracy, latency) in zip(ids, SCORES, strict=False):
        metrics = {"accuracy": accuracy, "latency_ms": latency}
        api.record_evaluation(repo, cid, "quality", metrics, source="manual", by="ev")
    again = {"accuracy": 0.75, "latency_ms": 135}  # c1's latest evaluation is this one
    api.record_evaluation(repo, ids[1], "quality", again, source="manual", by="ev")
    api.record_evaluation(repo, ids[0], "odd", {"<i>m</i>": 0.5}, source="manual", by="ev")
    other = commits(repo, models["a2"], folder, "other", 2, "elsewhere")
    api.record_evaluation(repo, other[0], "odd", {"<i>m</i>": 0.1}, source="manual", by="ev")
    metrics = {"accuracy": 0.99, "latency_ms": 1}  # the head's: its page defaults to quality
    api.record_evaluation(repo, other[1], "quality", metrics, source="manual", by="ev")
    api.promote(repo, ids[3], "production", by="alice")
    api.promote(repo, ids[0], "staging", by="alice")
    api.tag(repo, "chat@v3", ids[2], by="alice")
    api.tag(repo, "chat@v5", ids[4], by="alice")
    return ids


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def site(request, tmp_path_factory, models):
    with contextlib.ExitStack() as stack:
        url = None if request.param == "sqlite" else stack.enter_context(pg_database())
        folder = tmp_path_factory.mktemp(f"web-evaluations-{request.param}")
        repo, _ = api.init(folder / "repo", url)
        stack.callback(repo.close)
        ids = prepare(repo, models, folder)
        tokens = {
            "reader": create_token(repo.root, "reader", "reader"),
            "outsider": create_token(repo.root, "outsider", "reader", ("other",)),
        }
        server = start_registry(repo.root)
        stack.callback(server.stop)
        s = Site(server, tokens, ids, repo)
        stack.callback(lambda: [c.close() for c in s.clients.values()])
        s.browser = chromium(Path(tempfile.mkdtemp(prefix="chromium-", dir=folder)))
        stack.callback(s.browser.quit)
        sign_in(s.browser, server.url, tokens["reader"])
        yield s


def cells(browser, css: str) -> list[str]:
    return [e.text for e in browser.find_elements("css selector", css)]


def test_the_table_has_each_evaluated_commit_newest_first_with_each_metric(site):
    b = site.open("/evaluations/chat@quality")
    rows = b.find_elements("css selector", "#evaluations tbody tr")
    shown = [r.get_attribute("data-commit") for r in rows]
    assert shown == list(reversed(site.ids[:5]))  # c5 has no evaluation; other's is not here
    head = cells(b, "#evaluations thead th")
    assert head[:5] == ["commit", "message", "author", "time", "contract version"]  # not a tag
    assert head[5:7] == ["accuracy", "latency_ms"]
    by_commit = {r.get_attribute("data-commit"): r for r in rows}
    c1 = by_commit[site.ids[1]].find_elements("css selector", "td")
    assert c1[0].text == site.ids[1][:12] and c1[1].text == "step <b> 1"
    assert [c1[5].text, c1[6].text] == ["0.75", "135"]  # its latest evaluation
    assert c1[7].text == ""
    assert by_commit[site.ids[0]].find_elements("css selector", "td")[7].text == "staging"
    outside = [e.text for e in b.find_elements("css selector", "td.outside")]
    assert sorted(outside) == ["0.42", "230"]  # c2's accuracy < 0.5, c4's latency > 200
    link = by_commit[site.ids[3]].find_element("css selector", "a.id")
    link.click()
    wait_for(b, lambda: "/commit/" in b.current_url)
    assert site.ids[3] in b.current_url


def test_the_line_page_links_to_its_evaluations_and_their_contracts(site):
    b = site.open("/line/chat")
    b.find_element("id", "evaluations-link").click()
    wait_for(b, lambda: b.find_element("id", "contract").text == "odd")  # the first by name
    b.find_element("link text", "quality").click()
    wait_for(b, lambda: b.find_element("id", "contract").text == "quality")
    assert b.current_url.endswith("/evaluations/chat@quality")


def test_without_a_contract_the_page_takes_one_the_head_is_evaluated_under(site):
    found = re.search(r'id="contract">([^<]*)<', site.page("/evaluations/other").text)
    assert found.group(1) == "quality"  # the head's, though odd comes first by name


def test_the_chart_marks_the_holders_and_draws_the_contracts_bound(site):
    b = site.open("/evaluations/chat@quality")
    assert b.find_element("css selector", "#metrics .current").text == "accuracy"
    points = b.find_elements("css selector", "#chart circle.point")
    assert [p.get_attribute("data-commit") for p in points] == site.ids[:5]  # oldest first
    ys = [float(p.get_attribute("cy")) for p in points]
    accuracies = [0.62, 0.75, 0.42, 0.8, 0.86]
    assert sorted(range(5), key=lambda i: ys[i]) == sorted(range(5), key=lambda i: -accuracies[i])
    held = {
        g.get_attribute("data-commit"): g.find_element("css selector", "text").text
        for g in b.find_elements("css selector", "#chart g.holder")
    }
    assert held == {site.ids[3]: "production", site.ids[0]: "staging"}
    bigger = [p.get_attribute("data-commit") for p in points if "held" in p.get_attribute("class")]
    assert sorted(bigger) == sorted([site.ids[0], site.ids[3]])
    bound = b.find_element("css selector", "#chart g.bound")
    assert bound.find_element("css selector", "text").text == "min 0.5"
    line_y = float(bound.find_element("css selector", "line").get_attribute("y1"))
    assert ys[2] > line_y > max(ys[0], ys[1], ys[3], ys[4])  # only c2 lies below the min
    b.save_screenshot(str(Path(site.repo.root).parent / "evaluations.png"))


def test_the_charts_x_axis_names_each_commit_by_its_tag_or_its_id(site):
    b = site.open("/evaluations/chat@quality")
    ids = site.ids
    labels = b.find_elements("css selector", "#x-axis text")
    assert [x.text for x in labels] == [ids[0][:12], ids[1][:12], "v3", ids[3][:12], "v5"]
    points = b.find_elements("css selector", "#chart circle.point")
    assert [x.get_attribute("data-commit") for x in labels] == ids[:5]
    for label, point in zip(labels, points, strict=True):  # each under its point
        assert abs(label.location["x"] + label.size["width"] - point.location["x"]) < 20
        assert label.location["y"] > point.location["y"]
    assert [x.text for x in b.find_elements("css selector", "#x-axis text.tag")] == ["v3", "v5"]
    row = b.find_element("css selector", f"#evaluations tr[data-commit='{ids[2]}'] td")
    assert row.text == f"{ids[2][:12]} v3"


def test_the_x_axis_keeps_the_tagged_commits_when_not_every_name_fits():
    commits = [f"{i:064x}" for i in range(200)]
    tags = {commits[7]: ["v1"], commits[8]: ["v2"], commits[150]: ["v3"]}
    laid = chart.layout(commits, {c: float(i) for i, c in enumerate(commits)}, {}, {}, tags)
    xs = [label.x for label in laid.labels]
    assert xs == sorted(xs) and all(b - a >= chart.GAP for a, b in zip(xs, xs[1:]))
    named = {label.commit: label.text for label in laid.labels}
    assert named[commits[150]] == "v3" and named[commits[-1]] == commits[-1][:12]
    assert ("v1" in named.values()) != ("v2" in named.values())  # a pixel apart: one fits
    assert 30 < len(laid.labels) < 60
    few = chart.layout(commits[:3], {}, {}, {}, None)
    assert [label.text for label in few.labels] == [c[:12] for c in commits[:3]]


def test_choosing_a_metric_is_a_link_that_redraws_the_chart_with_its_bound(site):
    b = site.open("/evaluations/chat@quality")
    b.find_element("link text", "latency_ms").click()
    wait_for(b, lambda: b.find_element("css selector", "#metrics .current").text == "latency_ms")
    assert b.current_url.endswith("?metric=latency_ms")
    assert cells(b, "#chart g.bound text") == ["max 200"]
    titles = [
        t.get_attribute("textContent") for t in b.find_elements("css selector", "#chart title")
    ]
    assert f"{site.ids[4][:12]}: latency_ms 230" in titles


def test_a_metric_name_with_markup_is_text_in_the_table_and_the_chart(site):
    page = site.page("/evaluations/chat@odd")
    assert page.status_code == 200
    assert "<i>" not in page.text and "&lt;i&gt;m&lt;/i&gt;" in page.text
    b = site.open("/evaluations/chat@odd")
    assert "<i>m</i>" in cells(b, "#evaluations thead th")
    assert b.find_elements("css selector", "#chart i, #evaluations i") == []
    assert cells(b, "#chart g.bound text") == ["max 1"]


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/evaluations/nope@quality", 404, ("line", "'nope'")),
        ("/evaluations/chat@nope", 404, ("contract", "nope")),
        ("/evaluations/chat@quality?metric=nope", 404, ("metric", "nope")),
        ("/evaluations/chat@", 404, ("LINE@CONTRACT", "chat@")),
        ("/evaluations/chat@quality@x", 404, ("LINE@CONTRACT", "chat@quality@x")),
        ("/evaluations/chat@quality?metric=" + "x" * 501, 422, ()),
    ],
)
def test_an_unknown_line_contract_or_metric_is_a_404_in_one_line(site, path, status, words):
    page = site.page(path)
    assert page.status_code == status
    if words:
        found = re.search(r'<p class="error" id="error">(.*?)</p>', page.text, re.S).group(1)
        error = html.unescape(re.sub(r"<[^>]+>", "", found))
        assert "\n" not in error and all(w in error for w in words), error


def test_markup_in_the_address_is_escaped_on_the_error_page(site):
    page = site.page("/evaluations/chat@quality?metric=%3Cscript%3Ex%3C/script%3E")
    assert page.status_code == 404
    assert "<script>" not in page.text and "&lt;script&gt;x&lt;/script&gt;" in page.text
    page = site.page("/evaluations/%3Cb%3Echat@quality")
    assert page.status_code == 404 and "<b>chat" not in page.text


def test_a_contract_nothing_of_the_line_is_evaluated_under_says_so(site):
    page = site.page("/evaluations/other@unused?metric=")
    assert page.status_code == 200 and 'id="chart"' not in page.text
    assert "no commit of other is evaluated under unused" in page.text


def test_a_token_limited_to_other_lines_is_refused(site):
    assert site.page("/evaluations/chat@quality", who="outsider").status_code == 403
    page = site.page("/evaluations/other@quality", who="outsider")
    assert page.status_code == 200 and page.text.count('<tr data-commit="') == 1


def test_without_a_session_the_page_sends_to_sign_in(site):
    answer = httpx.get(site.server.url + "/evaluations/chat@quality", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/signin?next=")


def test_the_page_holds_the_newest_commits_when_there_are_more(site):
    rows, total = evaluated(site.repo, "chat", "quality", cap=2)
    assert total == 5 and [r.commit for r in rows] == [site.ids[4], site.ids[3]]
    rows, total = evaluated(site.repo, "chat", "nope")
    assert (rows, total) == ([], 0)
