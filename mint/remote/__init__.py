"""mint against a registry: the same operations as `mint.api`, over the registry's HTTP API.

- `http`: the HTTP client (bearer token; `{"error": ...}` answers become mint's errors);
- `repo`: `RemoteRepo`, what `--repo URL` opens;
- `wire`: JSON answers back into `mint.objects` dataclasses, commits into their wire form;
- `operations`: each façade operation that works against a URL, same name and signature;
- `blobs`: downloads verified while written, uploads of what the registry lacks;
- `transfer_client`: push, and `fetch_client`: fetch and clone, the git way;
- `config`: remotes of a local repository and the tokens of `mint login`.
"""
