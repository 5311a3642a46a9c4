"""The errors of evidence from harnesses and of merges (mint.gates.harness,
mint.porcelain.harness, mint.porcelain.merge): part of `mint.errors`, which re-exports them."""

from __future__ import annotations

from mint.errors import EvaluationFailed, MintError


class InvalidResults(EvaluationFailed, ValueError):
    """A harness's results file that mint cannot read as an evaluation (mint.gates.harness)."""

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: {why}; nothing recorded")
        self.path, self.why = path, why


class OtherModel(EvaluationFailed, ValueError):
    """A results file whose model is not the commit it would be recorded for."""

    def __init__(self, rev: str, why: str):
        super().__init__(f"the results are not of {rev}: {why}; nothing recorded")
        self.rev, self.why = rev, why


class MergeMismatch(MintError, ValueError):
    """Adapters that cannot be merged as asked: the one line names what differs."""

    def __init__(self, why: str):
        super().__init__(f"cannot merge: {why}")
        self.why = why
