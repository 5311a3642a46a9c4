"""The errors of traces and their feedback (mint.traces: what serving processes record, the
datasets exported from it): part of `mint.errors`, which re-exports them."""

from __future__ import annotations

from mint.errors import MintError


class TraceNotFound(MintError, LookupError):
    """Feedback named a completion id that no recorded trace has."""

    def __init__(self, trace_id: str):
        super().__init__(f"no trace with id {trace_id!r}")
        self.trace_id = trace_id


class InvalidFeedback(MintError, ValueError):
    def __init__(self, why: str):
        super().__init__(f"invalid feedback: {why}")
        self.why = why


class InvalidTraces(MintError, ValueError):
    """A batch of trace rows sent to a registry that it refuses whole."""

    def __init__(self, why: str):
        super().__init__(f"invalid traces: {why}")
        self.why = why


class DatasetNotFound(MintError, LookupError):
    def __init__(self, dataset_id: str):
        super().__init__(f"no dataset {dataset_id!r}")
        self.dataset_id = dataset_id
