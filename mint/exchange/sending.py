"""What a push or a fetch sends: the commits the other side lacks, the blobs they name, and
their wire form.

A sender lists the commits reachable from its heads that the receiver lacks (parents and set
members first), sends the blobs they name (verified on arrival by the store), then the objects:
the commits, the bases they are bound to, their evaluations and signatures. The wire format is
in docs/registry-api.md.
"""

from __future__ import annotations

import sqlalchemy as sa

from mint import schema as s
from mint.commits import rows
from mint.exchange.wire import commit_wire as wire_form
from mint.ids import iso
from mint.signing.commits import signatures_wire


def reachable(conn, heads: list[str], have: list[str]) -> list[str]:
    """Commits reachable from HEADS (through parents and set members), not through HAVE,
    in dependency order: everything a commit refers to comes before it."""
    stop, order, seen = set(have), [], set()
    for head in heads:
        stack = [(head, False)]
        while stack:
            cid, done = stack.pop()
            if done:
                order.append(cid)
                continue
            if cid in seen or cid in stop:
                continue
            seen.add(cid)
            rows.commit_row(conn, cid)  # an unknown head is an error, not an empty push
            stack.append((cid, True))
            stack += [(d, False) for d in reversed(_refers_to(conn, cid))]
    return order


def recent(conn, heads: list[str], limit: int) -> list[str]:
    """Up to LIMIT commits reachable from HEADS (through parents and set members), nearest
    first: where a push looks for the blobs a registry may lack before it knows its heads."""
    queue, seen = list(dict.fromkeys(heads)), set(heads)
    out: list[str] = []
    while queue and len(out) < limit:
        cid = queue.pop(0)
        out.append(cid)
        for d in _refers_to(conn, cid):
            if d not in seen:
                seen.add(d)
                queue.append(d)
    return out


def _refers_to(conn, cid: str) -> list[str]:
    members = [m.commit_id for m in rows.members_of(conn, cid)]
    return rows.parents_of(conn, cid) + members


def blob_sizes(conn, ids: list[str]) -> dict[str, int]:
    """Every blob the commits IDS name, with its size."""
    out: dict[str, int] = {}
    for cid in ids:
        for f in rows.files_of(conn, cid).values():
            out[f.sha256] = f.size
    return out


def export_objects(conn, ids: list[str]) -> dict:
    """The wire form of commits IDS, the bases they are bound to, and their evaluations."""
    commits = [commit_wire(conn, cid) for cid in ids]
    names = sorted({c["base"] for c in commits if c["base"]})
    bases = [_base_wire(conn, n) for n in names]
    payload = {"bases": bases, "commits": commits, "evaluations": _evaluations_wire(conn, ids)}
    return payload | signatures_wire(conn, ids)


def commit_wire(conn, cid: str) -> dict:
    """Stored commit CID in wire form (`mint.exchange.wire.commit_wire`)."""
    return wire_form(rows.detail(conn, cid))


def _base_wire(conn, name: str) -> dict:
    row = conn.execute(sa.select(s.bases).where(s.bases.c.name == name)).one()
    return {"name": row.name, "fingerprint": row.fingerprint, "config": row.config}


def _evaluations_wire(conn, ids: list[str]) -> list[dict]:
    e, c = s.evaluations.c, s.contracts.c
    named = (c.name.label("c_name"), c.version.label("c_version"), c.source.label("c_source"))
    q = sa.select(s.evaluations, *named).join(s.contracts, c.id == e.contract_id)
    q = q.where(e.commit_id.in_(ids)).order_by(e.id)
    return (
        [
            {
                "commit": r.commit_id,
                "contract": {"name": r.c_name, "version": r.c_version, "source": r.c_source},
                "metrics": r.metrics,
                "source": r.source,
                "evaluator": r.evaluator,
                "data_hash": r.data_hash,
                "by": r.by,
                "at": iso(r.at),
            }
            for r in conn.execute(q)
        ]
        if ids
        else []
    )
