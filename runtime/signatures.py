"""`mint serve --require-signed [--keys ...]`: a version is served only if it is signed.

`SignatureGuard` judges a set or adapter commit with `mint.signing.policy.judge` over
`api.verify`, the one verifier `mint verify` runs: against the repository's trusted keys, or
on a registry against the registry's. A set passes when its own signature verifies, else when
every member's does; with KEYS, only those keys' signatures count. It runs before anything of
the version is fetched or loaded: at start (where a refusal is the command's one line and exit
1) and on every move the runtime follows and every canary (`guarded`, around `load_spec`),
where a refusal leaves the serving version serving. Each refusal is counted in `/metrics` as
`mint_signature_refusals_total{reason=...}` (unsigned, not_verified, key_not_allowed).

A version kept resident in the CPU tier is judged again before it serves again (the
runtime's `admit`), though nothing of it is fetched or loaded: a key trusted when it was
loaded may have been removed since.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence

from mint import api
from mint.errors import NotVerified, RevisionNotFound
from mint.objects import SetSpec
from mint.refs.revisions import nearest
from mint.runtime.metrics import Metrics
from mint.signing.policy import Verdict, judge

log = logging.getLogger("mint.runtime")


class SignatureGuard:
    """Refuses (NotVerified) what is not signed by a trusted key, one of KEYS if any."""

    def __init__(self, repo, keys: Sequence[str] = (), metrics: Metrics | None = None):
        self.repo, self.keys, self.metrics = repo, tuple(keys), metrics

    @classmethod
    def open(cls, repo, keys: Sequence[str] = ()) -> SignatureGuard:
        """A guard for REPO; a name in KEYS that is not a trusted key is refused now, in one
        line, rather than refusing every version later."""
        trusted = [k.name for k in api.key_ls(repo)]
        for name in keys:
            if name not in trusted:
                raise RevisionNotFound(name, "no trusted key named", nearest(name, trusted))
        return cls(repo, keys)

    def verdict(self, rev: str) -> tuple[str, Verdict]:
        """(commit id, verdict) of REV: its own signature (a set's, with its members' that it
        names)."""
        commit = api.resolve(self.repo, rev)
        return commit, judge(self.verify_one, commit, self.keys)

    def verify_one(self, commit: str):
        return api.verify(self.repo, commit)

    def check(self, rev: str) -> str:
        """The commit REV names, if it is signed as required; else NotVerified, counted."""
        commit, verdict = self.verdict(rev)
        if not verdict.ok:
            if self.metrics is not None:
                self.metrics.signature_refused(verdict.reason)
            raise NotVerified(f"{rev} ({commit[:12]})" if rev != commit else rev, verdict.why)
        return commit

    def guarded(self, load_spec: Callable[[str], SetSpec]) -> Callable[[str], SetSpec]:
        """LOAD_SPEC (commit -> SetSpec), checking each commit before anything is fetched."""

        def load(commit: str) -> SetSpec:
            self.check(commit)
            log.info("%s: signed as required", commit[:12])
            return load_spec(commit)

        return load


def loading(repo, rev: str, guard: SignatureGuard | None):
    """(REV's SetSpec, the runtime's `load_spec`, its Metrics). With GUARD: REV judged first
    (one line, before the base loads), the very commit judged loaded (a move meanwhile is the
    follower's to judge), and each later commit judged before it is fetched; refusals are
    counted in the Metrics."""
    metrics, load_spec = Metrics(), functools.partial(api.set_spec, repo)
    if guard is None:
        return load_spec(rev), load_spec, metrics
    guard.metrics = metrics
    return load_spec(guard.check(rev)), guard.guarded(load_spec), metrics
