"""The porcelain: every client-side operation written once, over a repository backend
(`mint.backend`), so that it runs the same on a repository on this machine and on a registry
(`--repo URL`). As dulwich's porcelain runs over its transports.

`commit`     commit, set commit, set derive, candidates
`files`      checkout, export, set spec (what a server loads)
`evaluate`   a contract's evaluator run on a checkout, its result recorded
`improve`    one round of the learning loop
"""
