"""Push and fetch between repositories: what goes over the wire, what arrives and is admitted,
what a side already holds.

`wire` (the one wire form), `received` (what an outside value must be before it is used),
`possession` (a line-limited token names a stored blob only if it may read it or uploaded it),
`arriving` (a commit from its wire form, its id recomputed), `sending` (what a sender lists and
sends), `receiving` (what a receiver checks and records in one transaction) and `heads` (a
line head moved by compare-and-swap). Each is imported by its own name: this package imports
nothing, so a low layer may use `received` without loading the receiver.
"""
