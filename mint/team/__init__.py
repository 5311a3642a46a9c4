"""Who may do what in a shared repository: bearer tokens (`tokens`, stored hashed, with a role
and line globs), protected channels (`protection`) and webhooks (`webhooks`). These are user
operations over the metadata database, below the façade; the registry server (`mint.registry`)
checks requests with them and runs the webhook worker."""
