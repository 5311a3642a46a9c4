"""What serves, on a registry: the same operations, signatures and results as `mint.fleet`.

A report is recorded under the token's name (the registry bounds the live instances one token
reports for), so `by=` is not sent. A report is sent with a short deadline: a serving process
never waits long on a registry that is slow, it drops the report (`mint.fleet.reporter`).
"""

from __future__ import annotations

from mint.exchange.wire import decode_list
from mint.objects import ChannelFleet, ServedInterval
from mint.remote.repo import RemoteRepo

REPORT_TIMEOUT = 5.0  # seconds a report may take before it is dropped


def fleet_report(repo: RemoteRepo, report: dict, *, by: str | None = None, **_) -> None:
    """Send a serving process's REPORT (see `mint.fleet.report`) to the registry."""
    repo.client.post("/fleet/report", report, timeout=REPORT_TIMEOUT)


def fleet(repo: RemoteRepo, ref: str | None = None) -> list[ChannelFleet]:
    """Every name an instance follows (only REF, LINE@CHANNEL, when given), with its fleet."""
    return decode_list(ChannelFleet, repo.client.get("/fleet", ref=ref))


def fleet_history(repo: RemoteRepo, ref: str, *, at: str | None = None) -> list[ServedInterval]:
    """What each instance served for REF; with AT, what answered at that moment."""
    return decode_list(ServedInterval, repo.client.get("/fleet/history", ref=ref, at=at))
