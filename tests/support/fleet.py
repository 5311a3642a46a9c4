"""What the fleet tests serve, and the load balancer in front of two registry replicas.

`fleet_sets(repo, models, folder)` commits, on the tiny models: the members of the set
`macaron` signed by a trusted key `alice`, three versions of the set (the first two signed, the
third over a router nobody signed, which `mint serve --require-signed` refuses), and an
adapter line `chat` with a second commit for its channel to move to.

`Balancer` is what a Kubernetes Service is to a registry's replicas: a TCP proxy on 127.0.0.1
that hands each new connection to the next replica that accepts one, skipping a dead one, so
serving processes reach the registry by one URL while a replica dies.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from pathlib import Path

from mint import api

from support.texts import MACARON

BY = "ann"


def fleet_sets(repo, models, folder: Path) -> dict:
    """See the module's docstring. Returns {"sets": [s0, s1, s2], "chat": [c1, c2],
    "key": alice's private key}."""
    generated = api.key_generate(folder / "keys")
    api.key_add(repo, "alice", Path(generated.public_key).read_text(), by=BY)
    sign = generated.private_key
    api.base_add(repo, "tiny-llama", models["base"])
    for line, key in (("chat", "a2"), ("coding", "a3"), ("summary", "a2")):
        api.commit(repo, line, models[key], line, author=BY, sign=sign)
    mol = folder / "macaron"
    mol.mkdir(parents=True)
    (mol / "mol.toml").write_text(MACARON)
    (mol / "route.md").write_text("Route the request to one expert.\n")
    (mol / "summary.md").write_text("Summarise the turn.\n")
    sets = []
    for n, (router, signed) in enumerate((("a1", True), ("a2", True), ("a3", False))):
        key = sign if signed else None
        api.commit(repo, "router", models[router], f"router {n}", author=BY, sign=key)
        sets.append(api.set_commit(repo, mol / "mol.toml", f"set {n}", author=BY, sign=key).id)
    chat = [api.resolve(repo, "chat")]
    chat.append(api.commit(repo, "chat", models["a1"], "chat 2", author=BY, sign=sign).id)
    api.promote(repo, chat[0], "production", by=BY)
    api.promote(repo, sets[0], "production", by=BY)
    return {"sets": sets, "chat": chat, "key": sign}


class Balancer:
    """A TCP proxy on a free port of 127.0.0.1 over BACKENDS ((host, port) each)."""

    def __init__(self, backends: list[tuple[str, int]]):
        self.backends = list(backends)
        self._next = itertools.count()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, name="balancer", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _upstream(self) -> socket.socket | None:
        start = next(self._next)
        for i in range(len(self.backends)):
            backend = self.backends[(start + i) % len(self.backends)]
            try:
                return socket.create_connection(backend, timeout=2.0)
            except OSError:
                continue  # a dead replica: the next one
        return None

    def _serve(self, client: socket.socket) -> None:
        upstream = self._upstream()
        if upstream is None:
            client.close()
            return
        upstream.settimeout(None)
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _pipe(client, upstream)

    def close(self) -> None:
        self._closed = True
        self._listener.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy SOURCE to SINK until either closes; then close both."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def serving_cell(status_out: str, channel: str, holder: str) -> str | None:
    """The SERVING column of `mint status`'s row for CHANNEL held by HOLDER (its first 12
    digits): "live/all", or None where the row has no such column or no such row is shown."""
    lines = status_out.splitlines()
    header = lines[0].split()
    assert header[header.index("CHANNEL") :][:3] == ["CHANNEL", "HOLDER", "SERVING"], lines[0]
    for line in lines[2:]:
        cells = line.split()
        if channel in cells and cells[cells.index(channel) + 1 :][:1] == [holder[:12]]:
            return (cells[cells.index(channel) + 2 :] or [None])[0]
    return None
