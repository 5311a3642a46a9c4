"""`RemoteRepo`: a repository that lives behind a registry URL.

`mint.api` sends every operation whose first argument is a RemoteRepo to
`mint.remote.operations`. Code that reaches for a local repository's database or store gets
one clear error instead of an AttributeError.
"""

from __future__ import annotations

from mint.errors import LocalOnly
from mint.remote.http import Client, normalize


class RemoteRepo:
    """The registry at URL, acting with TOKEN (None: no Authorization header)."""

    is_remote = True  # what mint.api's dispatch looks for (it never imports this module)

    def __init__(self, url: str, token: str | None = None, *, transport=None):
        self.url = normalize(url)
        self.token = token
        self._transport = transport  # tests may hand httpx a transport
        self._client: Client | None = None
        self._whoami: dict | None = None

    def __repr__(self) -> str:
        return f"RemoteRepo({self.url!r})"

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.url, self.token, transport=self._transport)
        return self._client

    def whoami(self) -> dict:
        """{"name", "role", "lines"} of the token, asked once."""
        if self._whoami is None:
            self._whoami = self.client.get("/whoami")
        return self._whoami

    @property
    def db(self):
        raise LocalOnly("reading the metadata database directly")

    @property
    def store(self):
        raise LocalOnly("reading the object store directly")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
