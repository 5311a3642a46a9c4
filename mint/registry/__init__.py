"""The registry service: `mint registry serve`, a FastAPI app over the same operations as the CLI.

`app` builds the HTTP application (FastAPI is imported only there and below it); `auth` checks
each request's token and role with `mint.team` (tokens and protected channels, plain library
code over the metadata database), and `webhooks` runs the delivery worker.
"""
