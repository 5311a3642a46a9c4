"""The registry service: `mint registry serve`, a FastAPI app over the same operations as the CLI.

`tokens` (bearer tokens, stored hashed, with a role and line globs) and `protection`
(channels that need a role to move) are plain library code over the metadata database;
`app` builds the HTTP application (FastAPI is imported only there and below it).
"""
