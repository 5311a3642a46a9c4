"""Channel history in pages (`-n N --before ID`), and `status` and `ls` in pages, each one
indexed query however long the history or the catalog grows."""

from __future__ import annotations

import contextlib
import re

import pytest
import sqlalchemy as sa

from mint import api
from mint.errors import RevisionNotFound

from conftest import one_line_error


@pytest.fixture
def moved(mint, repo, models):
    """Three commits on `chat` (no contract: channels move freely), 23 moves of
    chat@production and one of chat@staging, and a second line. Returns (mint, all moves)."""
    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    ids = [api.commit(repo, "chat", models[k], k, author="t").id for k in ("a1", "a2", "a3")]
    api.commit(repo, "code", models["a1"], "code", author="t")
    api.promote(repo, ids[0], "staging", by="t")
    holder = None
    for i in range(23):
        if i % 4 == 3:
            holder = api.rollback(repo, "chat@production", by="t").to
        else:
            holder = next(c for c in ids[i % 3 :] + ids if c != holder)
            api.promote(repo, holder, "production", by="t")
    return mint, api.history(repo, "chat@production")


def test_pages_are_the_newest_moves_oldest_first(moved, repo):
    _, everything = moved
    assert len(everything) == 23 and [m.id for m in everything] == sorted(m.id for m in everything)
    page = api.history(repo, "chat@production", n=10)
    assert page == everything[-10:]
    older = api.history(repo, "chat@production", n=10, before=page[0].id)
    assert older == everything[-20:-10]
    last = api.history(repo, "chat@production", n=10, before=older[0].id)
    assert last == everything[:3]
    assert api.history(repo, "chat@production", n=10, before=last[0].id) == []
    assert api.history(repo, "chat@production", before=everything[5].id) == everything[:5]
    assert api.history(repo, "chat@staging", n=10) == api.history(repo, "chat@staging")


def test_paging_an_unknown_channel_still_says_so(moved, repo):
    from mint.errors import RevisionNotFound

    for kwargs in ({}, {"n": 5}, {"n": 5, "before": 10**9}):
        with pytest.raises(RevisionNotFound, match="unknown channel"):
            api.history(repo, "chat@nowhere", **kwargs)
    with pytest.raises(ValueError):
        api.history(repo, "chat@production", n=0)


def test_history_cli_pages_with_n_and_before(moved):
    mint, everything = moved
    page = mint("history", "chat@production", "-n", "5", "--json").json()
    assert [m["id"] for m in page] == [m.id for m in everything[-5:]]
    before = mint("history", "chat@production", "-n", "5", "--before", page[0]["id"], "--json")
    assert [m["id"] for m in before.json()] == [m.id for m in everything[-10:-5]]
    text = mint("history", "chat@production", "-n", "2")
    assert text.code == 0 and text.out.splitlines()[0].split()[0] == "ID"
    assert [int(line.split()[0]) for line in text.out.splitlines()[2:]] == [
        m.id for m in everything[-2:]
    ]
    assert mint("history", "chat@production", "-n", "0").code == 2  # a usage error
    one_line_error(mint("history", "chat@nowhere", "-n", "3"), "unknown channel")


def test_status_and_ls_page_by_line_name(moved, repo):
    mint, _ = moved
    full = api.status(repo)
    assert [s.name for s in full] == ["chat", "code"]
    assert full[0].channels.keys() == {"production", "staging"} and full[1].channels == {}
    assert api.status(repo, limit=1) == full[:1]
    assert api.status(repo, limit=1, after="chat") == full[1:]
    assert api.status(repo, after="code") == []
    assert api.ls(repo, limit=1, after="chat") == api.ls(repo)[1:]
    got = mint("status", "--limit", "1", "--after", "chat", "--json").json()
    assert [s["name"] for s in got] == ["code"]
    assert mint("status", "--limit", "0").code == 2


def test_every_page_of_a_shape_runs_the_one_statement_built_for_it(moved, repo):
    """A page's limit and AFTER are bound parameters: status and ls run, for every page of a
    shape (with or without a limit, with or without AFTER), the statement built once for that
    shape, each page still its own. Building the statement for each call cost more than
    reading a page of 50 lines with it (issue 24)."""
    names = [s.name for s in api.status(repo)] + ["zzz"]
    ran: dict[str, list] = {"status": [], "ls": []}
    calling = []

    def record(conn, clauseelement, multiparams, params, execution_options):
        if calling and isinstance(clauseelement, sa.sql.expression.Executable):
            ran[calling[-1]].append(clauseelement)

    sa.event.listen(repo.db.engine, "before_execute", record)
    try:
        for shape in ({"limit": 1}, {}):
            for call in ("status", "ls"):
                ran[call].clear()
                calling.append(call)
                pages = [getattr(api, call)(repo, after=after, **shape) for after in names]
                calling.pop()
                whole = getattr(api, call)(repo)
                assert pages == [
                    [x for x in whole if x.name > after][: shape.get("limit")] for after in names
                ]
                # status also reads the fleet's counts of a page of lines (issue 38): a
                # statement built once too
                counts = [q for q in ran[call] if "fleet_follows" in str(q)]
                assert len({id(q) for q in counts}) <= 1
                ran[call] = [q for q in ran[call] if not any(q is c for c in counts)]
                assert len(ran[call]) == len(names) and len({id(q) for q in ran[call]}) == 1
    finally:
        sa.event.remove(repo.db.engine, "before_execute", record)
    with pytest.raises(ValueError, match="limit must be 1 or more"):
        api.ls(repo, limit=0)


def test_log_and_resolve_run_the_statements_built_once(moved, repo):
    """`log REV -n N` (the ancestors' walk and their parents) and `resolve` (a line, LINE~N)
    run statements built once, their values bound: a later call with another revision or N
    runs no statement object the first did not. Building them for each call cost more than
    running them (issue 24: log -n 20 at 10^6 commits, 2.9 -> 1.3 ms on SQLite)."""
    seen: list = []
    kept: list = []  # every statement run stays alive, so no later one can reuse its id

    def record(conn, clauseelement, multiparams, params, execution_options):
        if isinstance(clauseelement, sa.sql.expression.Executable):
            seen.append(id(clauseelement))
            kept.append(clauseelement)

    def statements(call) -> set:
        seen.clear()
        answer = call()
        assert answer
        return set(seen)

    sa.event.listen(repo.db.engine, "before_execute", record)
    try:
        first = statements(lambda: api.log(repo, "chat", n=1))
        assert first and statements(lambda: api.log(repo, "chat", n=2)) <= first
        assert statements(lambda: api.log(repo, "code", n=3)) <= first
        steps = statements(lambda: api.resolve(repo, "chat~1"))
        assert statements(lambda: api.resolve(repo, "chat~2")) <= steps
        assert statements(lambda: api.resolve(repo, "code")) <= steps
    finally:
        sa.event.remove(repo.db.engine, "before_execute", record)
    whole = api.log(repo, "chat")
    assert [c.id for c in api.log(repo, "chat", n=2)] == [c.id for c in whole[:2]]
    assert (
        api.resolve(repo, "chat~1") == whole[1].id and api.resolve(repo, "chat~2") == whole[2].id
    )


def test_status_merges_each_line_with_its_channels(mint, repo, models):
    """status reads the lines, their channels and their remote-tracking channels as three
    ranges merged in (line, channel) order: each line has its own channels and no other's,
    also where names prefix one another, a line without channels sits between lines with
    them, and channels were made in reverse order of their names; every page is the same
    slice of the whole."""
    from mint import schema as s

    assert mint("base", "add", "tiny-llama", models["base"]).code == 0
    names = ["chat", "chat-2", "chat2", "code", "zeta"]
    ids = {n: api.commit(repo, n, models["a1"], n, author="t").id for n in names}
    for line, channels in {"chat": ["staging", "review", "production"], "chat2": ["beta"]}.items():
        for channel in channels:
            api.promote(repo, ids[line], channel, by="t")
    api.promote(repo, api.commit(repo, "zeta", models["a2"], "z2", author="t").id, "beta", by="t")
    with repo.db.read() as conn:  # what status must say, read plainly from the tables
        order = conn.execute(sa.select(s.lines.c.name).order_by(s.lines.c.name)).scalars().all()
        heads = dict(conn.execute(sa.select(s.lines.c.name, s.lines.c.head)).all())
        held: dict[str, dict[str, str]] = {n: {} for n in order}
        r = s.refs.c
        for line, name, target in conn.execute(
            sa.select(r.line, r.name, r.target).where(r.kind == "channel").order_by(r.name)
        ):
            held[line][name] = target
    full = api.status(repo)
    assert [st.name for st in full] == order and sorted(order) == sorted(names)
    assert [(st.head, st.channels) for st in full] == [(heads[n], held[n]) for n in order]
    assert [list(st.channels) for st in full if st.name == "chat"] == [
        ["production", "review", "staging"]
    ]
    assert full[order.index("chat-2")].channels == {} == full[order.index("code")].channels
    assert full[order.index("zeta")].channels["beta"] != ids["zeta"]  # its newer commit
    for after in [None, *order]:
        rest = full[order.index(after) + 1 :] if after else full
        assert api.status(repo, after=after) == rest
        for limit in (1, 2):
            assert api.status(repo, limit=limit, after=after) == rest[:limit]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_each_query_is_an_index_lookup(moved, repo):
    """No query of history, status, ls or log scans a table of the catalog (SQLite's plans)."""
    _, everything = moved
    other = next(m.to for m in everything if m.to != everything[-1].to)
    calls = [
        lambda: api.history(repo, "chat@production", n=5, before=everything[-1].id),
        lambda: api.status(repo),
        lambda: api.status(repo, limit=1, after="chat"),
        lambda: api.ls(repo, limit=1, after="chat"),
        # log's walk, its decorations (issue 36) and its narrowing
        lambda: api.log(repo, "chat", 5),
        lambda: api.log(repo, "chat", 5, since="2000-01-01", author="t"),
        lambda: api.promote(repo, other, "production", by="t"),
        lambda: api.rollback(repo, "chat@production", by="t"),
    ]
    catalog = r"SCAN (refs|ref_history|commits|evaluations)\b"
    for call in calls:
        for statement, params in _statements(repo, call):
            with repo.db.read() as conn:
                plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params).all()
            scans = [r[-1] for r in plan if re.match(catalog, r[-1])]
            assert scans == [], (statement, plan)


def test_promote_names_the_commit_the_resolver_names(moved, repo, models):
    """A promote reads a hex revision, its line and the channel in one query; it still means
    what it means everywhere: a unique prefix names its commit, a line of that name wins."""
    from mint.errors import RevisionNotFound

    _, everything = moved
    cid = everything[0].to
    move = api.promote(repo, cid[:10], "qa", by="t")
    assert (move.line, move.to) == ("chat", cid) and api.resolve(repo, "chat@qa") == cid
    named = api.commit(repo, cid[:12], models["a2"], "a line named like a commit", author="t")
    move = api.promote(repo, cid[:12], "qa", by="t")
    assert (move.line, move.to) == (cid[:12], named.id) != ("chat", cid)
    assert api.resolve(repo, f"{cid[:12]}@qa") == named.id
    with pytest.raises(RevisionNotFound):
        api.promote(repo, "chat~99", "qa", by="t")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_show_finds_a_commits_tags_by_target(moved, repo):
    """Not through the index that lists every channel (by kind): it would read every tag."""
    api.tag(repo, "chat@v1", "chat", by="t")
    seen = _statements(repo, lambda: api.show(repo, "chat@v1"))
    by_target = [(q, p) for q, p in seen if "FROM refs" in q and "refs.target =" in q]
    assert by_target
    for statement, params in by_target:
        with repo.db.read() as conn:
            plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params).all()
        # show reads a commit's parents, files, refs... in one UNION ALL: its refs part
        on_refs = [r[-1] for r in plan if " refs " in f" {r[-1]} "]
        assert on_refs == ["SEARCH refs USING INDEX ix_refs_target (target=?)"], plan


def _statements(repo, call) -> list[tuple[str, tuple]]:
    seen = []

    def record(conn, cursor, statement, params, context, executemany):
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append((statement, tuple(params)))

    sa.event.listen(repo.db.engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        sa.event.remove(repo.db.engine, "before_cursor_execute", record)
    return seen


# Reads that run without BEGIN and COMMIT on PostgreSQL (`Database.read(autocommit=True)`).
AUTOCOMMIT_READS = {
    "status": lambda repo: api.status(repo),
    "status page": lambda repo: api.status(repo, limit=1, after="chat"),
    "ls": lambda repo: api.ls(repo),
    "log": lambda repo: api.log(repo, "chat", n=2),
    "show": lambda repo: api.show(repo, "chat@production"),
    "resolve": lambda repo: api.resolve(repo, "chat~1"),
}


@pytest.mark.parametrize("call", sorted(AUTOCOMMIT_READS))
def test_catalog_reads_skip_begin_and_commit_on_postgresql(moved, repo, call):
    """status, ls, log, show and resolve read in autocommit on PostgreSQL: no BEGIN and no
    COMMIT, two round trips fewer. On SQLite they read in a transaction (its BEGIN is local
    and keeps one snapshot)."""
    postgres = repo.db.dialect == "postgresql"
    seen = []

    def record(conn, cursor, statement, params, context, executemany):
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            dbapi = conn.connection.dbapi_connection
            seen.append(dbapi.autocommit if postgres else dbapi.in_transaction)

    sa.event.listen(repo.db.engine, "before_cursor_execute", record)
    try:
        answer = AUTOCOMMIT_READS[call](repo)
    finally:
        sa.event.remove(repo.db.engine, "before_cursor_execute", record)
    assert answer
    assert seen and all(seen), seen


@pytest.mark.parametrize("read_fails", [False, True], ids=["read ends", "read raises"])
def test_a_connection_back_from_an_autocommit_read_writes_in_a_transaction(repo, read_fails):
    """The isolation level an autocommit read set goes with it, also when the read ends in an
    error (an unknown revision, say): the same pooled connection's next write still rolls
    back on an error."""
    with contextlib.suppress(RevisionNotFound):
        with repo.db.read(autocommit=True) as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
            first = conn.connection.dbapi_connection
            if read_fails:
                raise RevisionNotFound("nope", "no such revision")
    count = sa.text("SELECT count(*) FROM alembic_version")
    with repo.db.read() as conn:
        before = conn.execute(count).scalar()
    with pytest.raises(RuntimeError):
        with repo.db.write() as conn:
            assert conn.connection.dbapi_connection is first  # the read's connection, reused
            conn.execute(sa.text("INSERT INTO alembic_version (version_num) VALUES ('x')"))
            raise RuntimeError("roll back")
    with repo.db.read() as conn:
        assert conn.execute(count).scalar() == before
