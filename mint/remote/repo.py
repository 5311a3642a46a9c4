"""`RemoteRepo`: a repository that lives behind a registry URL.

Its `backend` (`mint.remote.backend.RemoteBackend`) is what the porcelain and the façade run
over: one request to the registry for each operation the registry owns. Code that reaches
for a local repository's database gets one clear error instead of an AttributeError. Its
`store` is a local cache of the registry's blobs (content-addressed, so one cache serves every
registry), where the runtime finds a set's weights; without a cache folder, asking for it is
that same clear error.
"""

from __future__ import annotations

from pathlib import Path

from mint.errors import LocalOnly
from mint.remote.http import Client, normalize


class RemoteRepo:
    """The registry at URL, acting with TOKEN (None: no Authorization header). TOKEN_FROM
    says where the token came from (MINT_TOKEN, a login file), for the words of a refusal."""

    is_remote = True  # what mint.api's dispatch looks for (it never imports this module)

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        cache: Path | None = None,
        transport=None,
        token_from: str | None = None,
    ):
        self.url = normalize(url)
        self.token = token
        self.token_from = token_from
        self.cache = Path(cache) if cache is not None else None
        self._transport = transport  # tests may hand httpx a transport
        self._client: Client | None = None
        self._whoami: dict | None = None
        self._store = None

    def __repr__(self) -> str:
        return f"RemoteRepo({self.url!r})"

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(
                self.url, self.token, transport=self._transport, token_from=self.token_from
            )
        return self._client

    def whoami(self) -> dict:
        """{"name", "role", "lines"} of the token, asked once."""
        if self._whoami is None:
            self._whoami = self.client.get("/whoami")
        return self._whoami

    @property
    def backend(self):
        """The repository backend the porcelain runs over (`mint.remote.backend`)."""
        from mint.remote.backend import RemoteBackend

        return RemoteBackend(self)

    @property
    def db(self):
        raise LocalOnly("reading the metadata database directly")

    @property
    def store(self):
        """The local blob cache (a LocalObjectStore), verified on every read that matters."""
        if self.cache is None:
            raise LocalOnly("reading the object store directly")
        if self._store is None:
            from mint.store import LocalObjectStore

            self.cache.mkdir(parents=True, exist_ok=True)
            self._store = LocalObjectStore(self.cache)
        return self._store

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
