"""`mint.api.open_repo`: a repository by where it is, a folder or a registry's URL.

Apart from `mint.remote.repo`, so that opening a local repository (every local command) loads
no HTTP client."""

from __future__ import annotations

from pathlib import Path


def open_repo(
    where=None,
    *,
    token: str | None = None,
    cache: Path | str | None = None,
    check_schema: bool = True,
):
    """The repository WHERE is: a registry's URL (http:// or https://) as a `RemoteRepo`
    acting with TOKEN (None: none sent) and keeping downloaded blobs in CACHE; otherwise the
    local repository at that folder, or found by walking up from the current one
    (`mint.repo.open_repo`, CHECK_SCHEMA as there). Every `mint.api` function takes either.
    The token is not read from the environment: pass it (`os.environ["MINT_TOKEN"]`)."""
    from mint.ids import is_url

    if is_url(where):
        from mint.remote.repo import RemoteRepo

        return RemoteRepo(str(where), token, cache=Path(cache) if cache is not None else None)
    if token is not None or cache is not None:
        raise TypeError("token and cache are for a registry's URL, not a folder")
    from mint.repo import open_repo as open_local

    return open_local(where, check_schema=check_schema)
