"""Where a recovery's seconds go: each run a fault took from its worker, followed from the
fault to its next claim, with what every other worker was doing meanwhile.

A sample splits into three parts: ``lease_left`` (from the fault to the end of the lease
its worker last renewed: the audit trail's last ``leased`` or ``heartbeat`` of that
holder), ``give_up_lag`` (from that end to the run being given up: another worker's
reaper noticed, or the struck worker released it at shutdown) and ``claim_lag`` (from
then to the next claim). Only a worker that runs, is not frozen and reaches the database
can give a run up or claim it, so each sample also says how long, between the fault and
the claim, no such worker was there (``no_healthy_s``): the harness mixes faults, and
with three workers a kill while another is frozen and the third restarting leaves nobody
to look.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

from benchmarks.chaos_faults import Fault
from simpleworkflow.models import Event

TERMINAL = {"succeeded", "failed", "cancelled"}
#: Events after which a run is no longer held by the worker that claimed it.
LET_GO = TERMINAL | {"released", "retried", "sleeping", "waiting", "gave_up"}
#: Faults after which the struck workers' runs are claimed again elsewhere (the others
#: keep their leases: a restart or a terminated connection costs no lease).
LEASE_LOSING = ("kill", "stop", "term", "silence", "half_open")
#: Faults that keep a worker from the database while they last.
CUT_OFF = ("restart", "silence")
#: A gap between two writes to the audit trail this long means the store took none: at
#: least three workers write (claims, steps, heartbeats every third of a lease) all along.
STALL = 0.5


@dataclasses.dataclass
class Life:
    """One worker process: when it was spawned and when it said it was ready."""

    name: str
    spawned: float
    ready: float


@dataclasses.dataclass
class Sample:
    """One run taken from its worker by ``fault``, until its next claim."""

    fault: Fault
    run_id: str
    holder: str
    lease_until: float
    given_up: float
    given_up_as: str  # "rescued" (an expired lease) or "released" (at shutdown)
    given_up_by: str | None  # the worker that recovered an expired lease
    claimed: float
    claimed_by: str | None

    @property
    def total(self) -> float:
        return self.claimed - self.fault.at

    @property
    def wait(self) -> float:
        """From the run being given up to its claim."""
        return self.claimed - self.given_up


def stamp(event: Event) -> float:
    return event.created_at.timestamp()


def samples(faults: Sequence[Fault], events: dict[str, list[Event]], lease: float) -> list[Sample]:
    """Each run that a struck worker held when a lease-losing fault struck and gave up
    because of it (by the audit trail: released at shutdown, or rescued from an expired
    lease; not a run whose attempt went on to end by itself), with its next claim."""
    found = []
    for fault in (f for f in faults if f.kind in LEASE_LOSING):
        for run_id, trail in events.items():
            holder, renewed = _held(trail, fault.at)
            if holder is None or holder not in fault.workers:
                continue
            after = [e for e in trail if stamp(e) > fault.at]
            ended = next((n for n, e in enumerate(after) if e.event_type in LET_GO), None)
            if ended is None or not _given_up(after[ended]):
                continue
            claim = next((e for e in after[ended:] if e.event_type == "leased"), None)
            if claim is None:
                continue
            found.append(
                Sample(
                    fault=fault,
                    run_id=run_id,
                    holder=holder,
                    lease_until=renewed + lease,
                    given_up=stamp(after[ended]),
                    given_up_as="released" if after[ended].event_type == "released" else "rescued",
                    given_up_by=(after[ended].data or {}).get("recovered_by"),
                    claimed=stamp(claim),
                    claimed_by=(claim.data or {}).get("worker_id"),
                )
            )
    return found


def _given_up(event: Event) -> bool:
    if event.event_type == "released":
        return True
    data = event.data if isinstance(event.data, dict) else {}
    return event.event_type == "retried" and data.get("reason") == "lease_expired"


def _held(trail: list[Event], at: float) -> tuple[str | None, float]:
    """The worker that held the run at ``at``, if one did, and when it last renewed the
    lease (claimed it or sent a heartbeat the store accepted)."""
    holder, renewed = None, 0.0
    for event in trail:
        if stamp(event) > at:
            break
        if event.event_type == "leased":
            holder, renewed = (event.data or {}).get("worker_id"), stamp(event)
        elif event.event_type == "heartbeat" and holder is not None:
            renewed = stamp(event)
        elif event.event_type in LET_GO:
            holder = None
    return holder, renewed


def state(life: Life, at: float, faults: Sequence[Fault], proxied: bool) -> str:
    """What the worker ``life`` was doing at ``at``: ``absent`` (not yet spawned, or gone
    after a kill or a SIGTERM), ``starting``, ``frozen`` (SIGSTOP), ``cut off`` (the
    database restarting, or its network silent), or ``healthy``."""
    if at < life.spawned:
        return "absent"
    if at < life.ready:
        return "starting"
    mine = [f for f in faults if life.name in f.workers and f.at <= at]
    if any(f.kind in ("kill", "term") for f in mine):
        return "absent"
    if any(f.kind == "stop" and (f.back is None or at < f.back) for f in mine):
        return "frozen"
    for fault in faults:
        back = float("inf") if fault.back is None else fault.back
        # A silent proxy holds every connection through it, a new worker's too.
        if fault.kind in CUT_OFF and fault.at <= at < back and (fault.kind == "restart" or proxied):
            return "cut off"
    return "healthy"


def no_healthy(
    sample: Sample, lives: Sequence[Life], faults: Sequence[Fault], proxied: set[str]
) -> float:
    """Seconds between the fault and the claim during which no worker other than the
    struck ones was healthy: nobody could give the run up or claim it then."""
    start, end = sample.fault.at, sample.claimed
    cuts = sorted(
        {start, end}
        | {t for life in lives for t in (life.spawned, life.ready) if start < t < end}
        | {t for f in faults for t in (f.at, f.back or f.at) if start < t < end}
    )
    others = [life for life in lives if life.name not in sample.fault.workers]
    empty = 0.0
    for a, b in itertools.pairwise(cuts):
        middle = (a + b) / 2
        if not any(state(o, middle, faults, o.name in proxied) == "healthy" for o in others):
            empty += b - a
    return empty


def describe(
    sample: Sample, lives: Sequence[Life], faults: Sequence[Fault], proxied: set[str]
) -> dict[str, Any]:
    """One sample as a JSON line: its parts, and every other worker's state when the
    lease ran out and when the run was given up."""
    others = [life for life in lives if life.name not in sample.fault.workers]
    return {
        "fault": sample.fault.kind,
        "at": round(sample.fault.at, 3),
        "run": sample.run_id,
        "holder": sample.holder,
        "total_s": round(sample.total, 3),
        "lease_left_s": round(sample.lease_until - sample.fault.at, 3),
        "give_up_lag_s": round(sample.given_up - sample.lease_until, 3),
        "claim_lag_s": round(sample.wait, 3),
        "given_up_as": sample.given_up_as,
        "given_up_by": sample.given_up_by,
        "claimed_by": sample.claimed_by,
        "no_healthy_s": round(no_healthy(sample, lives, faults, proxied), 3),
        "at_lease_end": _states(others, sample.lease_until, faults, proxied),
        "at_give_up": _states(others, sample.given_up, faults, proxied),
    }


def _states(
    lives: Sequence[Life], at: float, faults: Sequence[Fault], proxied: set[str]
) -> dict[str, str]:
    """The state of each worker present at ``at`` (started, not yet gone)."""
    states = {life.name: state(life, at, faults, life.name in proxied) for life in lives}
    return {name: s for name, s in states.items() if s != "absent"}


def contention(found: Sequence[Sample], events: dict[str, list[Event]]) -> list[dict[str, float]]:
    """For each sample, what else was claimed while it waited after being given up:
    ``claims_meanwhile``, claims of any run; ``rescued_ahead``, of those, runs given up
    by a fault too. Many claims meanwhile: the run waited its turn in the queue (runs due
    before it went first); few: no worker had a slot free."""
    claims = sorted(
        stamp(e) for trail in events.values() for e in trail if e.event_type == "leased"
    )
    writes = sorted(stamp(e) for trail in events.values() for e in trail)
    rescues = sorted(s.claimed for s in found)
    return [
        {
            "claims_meanwhile": _between(claims, s.given_up, s.claimed),
            "rescued_ahead": _between(rescues, s.given_up, s.claimed),
            "writes_stalled_s": round(stalled(writes, s.lease_until, s.given_up), 3),
        }
        for s in found
    ]


def stalled(writes: list[float], start: float, end: float) -> float:
    """Seconds of ``start``..``end`` within gaps of over :data:`STALL` seconds between
    two writes to the audit trail by anyone: the store took no writes then (on SQLite, a
    worker frozen inside a write transaction keeps every other out)."""
    first = bisect.bisect_right(writes, start)
    last = bisect.bisect_left(writes, end)
    edges = [start, *writes[first:last], end]
    return sum(b - a for a, b in itertools.pairwise(edges) if b - a > STALL)


def _between(ordered: list[float], start: float, end: float) -> int:
    return bisect.bisect_left(ordered, end) - bisect.bisect_right(ordered, start)


def cause(line: dict[str, Any], target: float) -> str:
    """Why a sample over ``target`` seconds was slow: the largest part over its share."""
    if line["no_healthy_s"] > 0 and line["total_s"] - line["no_healthy_s"] <= target:
        return "no healthy worker"
    if line["lease_left_s"] > target - 1.0:
        return "lease"
    if line["give_up_lag_s"] > 0.5 and line.get("writes_stalled_s", 0.0) > 0.5:
        return "store took no writes"
    if line["give_up_lag_s"] > 0.5:
        return "given up late"
    if line["claim_lag_s"] > 1.0 and line.get("rescued_ahead", 0) >= 8:
        return "claimed late: other rescued runs first"
    if line["claim_lag_s"] > 1.0:
        return "claimed late"
    return "sum of parts"
