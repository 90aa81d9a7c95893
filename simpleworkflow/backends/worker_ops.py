"""Worker verbs: claims, heartbeats, outcomes and expired leases.

Every write for a leased run is fenced: it matches only while the run still carries the
lease token its worker was given at the claim.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from simpleworkflow.backends.core import StoreCore
from simpleworkflow.backends.ops import ATOMIC, Op, Rows, Statement, Stream
from simpleworkflow.backends.records import (
    CANCELLED,
    HELD,
    LOST,
    Claim,
    Claimed,
    Continuation,
    Failure,
    Lease,
    Outcomes,
    Release,
    Success,
)

OutcomeT = TypeVar("OutcomeT", Success | Continuation, Failure, Release)


class WorkerOps(StoreCore):
    # -- claims and leases -----------------------------------------------------------

    def claim(self, claim: Claim) -> Op[list[Lease]]:
        """Lease up to ``claim.limit`` due runs, highest priority and longest due first;
        or, while a suspect is due, that one alone if the worker is ``alone``, else none."""
        claimed = yield from self.claim_runs(claim)
        return claimed.leases

    def claim_runs(self, claim: Claim) -> Op[Claimed]:
        """:meth:`claim`, also saying when the earliest run it throttled is due."""
        name, params = self.claim_call(claim)
        rows = yield from self._claim_rows(self.stmt(name, **params), claim.wait_for_disk)
        # Postgres's claim returns leased runs only, with throttled_for when it throttled
        # runs and limited (a row of nulls but these if it leased none); runs over a rate
        # limit come back from SQLite's still pending, due again when the next window opens.
        waits = [
            float(row["throttled_for"]) for row in rows if row.get("throttled_for") is not None
        ]
        limited = next((row["limited"] for row in rows if row.get("limited") is not None), True)
        rows = [row for row in rows if row["id"] is not None]
        throttled = [row for row in rows if row["status"] != "leased"]
        rows = [row for row in rows if row["status"] == "leased"]
        if (rows or throttled) and not self.dialect.chained_writes:  # else nothing to do
            ids = [str(row["id"]) for row in rows]
            yield from self.then("claim", ids=ids, throttled=[str(row["id"]) for row in throttled])
        for row in throttled:
            due = self.read_time(row["run_at"])
            if isinstance(due, datetime):  # else the claim that finds it due fails it
                waits.append((due - self.decode_time(row["db_now"])).total_seconds())
        leases = [
            Lease(
                run=self.run_from_row(row),
                token=str(row["lease_token"]),
                claimed_at=self.decode_time(row["db_now"]),
                was_waiting_for=resumes(
                    self.read_json(row.get("was_waiting_for", row["waiting_for"]))
                ),
                isolated=bool(row["isolate"]),
                counted=row.get("counted") is not False,
            )
            for row in rows
        ]
        return Claimed(leases, min(waits) if waits else None, limited=bool(limited))

    def ids_stmt(self, query: str, /, **params: Any) -> Statement:
        """:meth:`stmt` of a query whose rows name runs by ``id``, read as text."""
        return self.stmt(query, **params)

    def claim_call(self, claim: Claim) -> tuple[str, dict[str, Any]]:
        """The claim's query and its parameters: the plain claim when the last found none
        of these types limited (a store without one has the full claim only)."""
        name = "claim" if claim.limited or "claim_plain" not in self.q else "claim_plain"
        return name, {
            "worker_id": claim.worker_id,
            "types": list(claim.types),
            "runtime": claim.runtime,
            "limit": claim.limit,
            "lease": float(claim.lease_seconds),
            "versions": json.dumps(dict(claim.versions)),
            "known": list(claim.known),
            "alone": claim.alone,
        }

    def _claim_rows(self, claim: Statement, wait_for_disk: bool) -> Op[Rows]:
        """The claim's rows; on Postgres sent in one pipeline (one implicit transaction)
        after ``claim_settings``, which has it planned once per connection and, unless
        ``wait_for_disk``, committed without waiting for the disk."""
        if "claim_settings" not in self.q:
            rows = yield claim
            return rows
        results: list[Rows] = []
        # Waiting for the disk keeps the connection's own setting (on, or stricter).
        synchronous_commit = None if wait_for_disk else "off"
        settings = self.stmt("claim_settings", synchronous_commit=synchronous_commit)
        statements = iter([settings, claim])
        # The listening connection, which runs nothing but claims, holds the settings for
        # its session and sends the claim alone (backends/postgres/listening.py).
        session = self.stmt("claim_settings_session", synchronous_commit=synchronous_commit)
        yield Stream(
            "-- the claim, planned once",
            statements=statements,
            take=results.append,
            session=session,
        )
        return results[-1]

    def fail_unparsable(self, types: list[str], worker_id: str) -> Op[list[str]]:
        """Fail for good the pending runs of ``types`` that no claim can lease, because
        their JSON breaks the schema's checks (see ``Dialect.checks_whole_rows``); return
        their ids. Nothing on a store that does not check whole rows."""
        if not self.dialect.checks_whole_rows:
            return []
        yield ATOMIC  # the runs and their events together
        rows = yield self.stmt("fail_unparsable", types=types)
        ids = [str(row["id"]) for row in rows]
        if ids:
            yield self.stmt("fail_unparsable_events", ids=ids, worker_id=worker_id)
        return ids

    def unknown_versions(self, claim: Claim) -> Op[list[tuple[str, str, int]]]:
        """Due runs of ``claim.types`` stamped with a code version this worker lacks."""
        rows = yield self.stmt("unknown_versions", types=list(claim.types), known=list(claim.known))
        return [(row["type"], row["code_version"], int(row["runs"])) for row in rows]

    def heartbeat(
        self,
        worker_id: str,
        leases: list[tuple[str, str]],
        lease_seconds: float,
        events: bool,
        margin: float = 0.0,
    ) -> Op[dict[str, str]]:
        """Extend held leases; map each run id to HELD, CANCELLED or LOST. A lease within
        ``margin`` seconds of its end (the worker's give-up margin: it has given the run
        up by then) is not extended, and is LOST: extended, it would keep the run from
        every other worker for another lease."""
        params = {"lease": float(lease_seconds), "worker_id": worker_id, "with_events": events}
        items = _lease_items(leases)
        rows = yield self.stmt("heartbeat", items=items, margin=float(margin), **params)
        extended = [str(row["id"]) for row in rows]
        if extended:
            yield from self.then("heartbeat", ids=extended, **params)
        states = dict.fromkeys(extended, HELD)
        others = [lease for lease in leases if lease[0] not in states]
        if others:
            # Not extended: cancelled, or no longer this worker's to keep.
            unextended = yield from self.lease_states(others)
            states.update((k, LOST if v == HELD else v) for k, v in unextended.items())
        return states

    def lease_states(self, leases: list[tuple[str, str]]) -> Op[dict[str, str]]:
        """Whether each lease is still held, or was cancelled or lost, without changing it."""
        rows = yield self.stmt("lease_states", items=_lease_items(leases))
        states = {}
        for row in rows:
            if row["status"] == "cancelled":
                state = CANCELLED
            elif row["status"] == "leased" and row["held"]:
                state = HELD
            else:
                state = LOST
            states[str(row["id"])] = state
        return states

    # -- outcomes --------------------------------------------------------------------

    def finish(self, outcomes: Outcomes, worker_id: str, reason: str = "shutdown") -> Op[set[str]]:
        """Record outcomes of leased runs; return the ids whose lease was still held."""
        batches: list[tuple[str, list[dict[str, Any]], dict[str, Any]]] = []
        # A run that continues as new ends as a success does, in the same statement (one
        # lock order over the counters); its successor follows below.
        ends: list[Success | Continuation] = [*outcomes.succeeded, *outcomes.continued]
        for counted, succeeded in self._by_count(ends):
            items: list[dict[str, Any]] = [
                {"id": s.run_id, "token": s.token, "result": s.result} for s in succeeded
            ]
            batches.append(("succeed_runs" if counted else "succeed_runs_plain", items, {}))
        for counted, failed in self._by_count(outcomes.failed):
            items = [_failure(f) for f in failed]
            batches.append(("fail_runs" if counted else "fail_runs_plain", items, {}))
        for counted, released in self._by_count(outcomes.released):
            items = [
                {"id": r.run_id, "token": r.token, "delay": round(r.delay, 3), "trace": r.trace}
                for r in released
            ]
            extra = {"worker_id": worker_id, "reason": reason}
            batches.append(("release_runs" if counted else "release_runs_plain", items, extra))
        # One statement alone commits as one (on Postgres, in autocommit: no BEGIN and
        # COMMIT to wait for); a suspension's wake-up check must see its own update, locked.
        together = outcomes.suspended or outcomes.continued
        if len(batches) > 1 or together or not self.dialect.chained_writes:
            yield ATOMIC
        accepted: set[str] = set()
        for name, items, extra in batches:
            accepted |= yield from self._fenced(name, items, **extra)
        if outcomes.continued:
            yield from self._continue([c for c in outcomes.continued if c.run_id in accepted])
        if outcomes.suspended:
            suspended = [
                {
                    "id": s.run_id,
                    "token": s.token,
                    "run_at": None if s.run_at is None else s.run_at.isoformat(),
                    "delay": round(s.delay, 3),
                    "waiting_for": s.waiting_for,
                    "events": s.events,
                    "trace": s.trace,
                }
                for s in outcomes.suspended
            ]
            done = yield from self._fenced("suspend_runs", suspended)
            if done:
                # A signal or child result that came while the run was leased wakes it now
                # (for any of the waits it suspended in).
                yield self.stmt("wake_suspended", ids=sorted(done))
            accepted |= done
        return accepted

    def _continue(self, continued: list[Continuation]) -> Op[None]:
        """Start the successors of runs that continue as new, which this transaction has
        just ended (fenced by their lease: a run whose lease was lost starts none)."""
        if not continued:
            return
        items = json.dumps(
            [
                {"id": c.run_id, "next": c.next_id, "payload": c.payload, "trace": c.trace}
                for c in continued
            ]
        )
        yield self.stmt("continue_runs", items=items)
        yield from self.then("continue_runs", items=items)

    def _by_count(self, outcomes: list[OutcomeT]) -> list[tuple[bool, list[OutcomeT]]]:
        """``outcomes`` in up to two batches: those whose lease was counted against a
        concurrency limit, and the rest (``False``), which the plain statements end where
        the store has them."""
        if not outcomes:
            return []
        plain = [o for o in outcomes if not o.counted] if "succeed_runs_plain" in self.q else []
        if not plain:
            return [(True, outcomes)]
        if len(plain) == len(outcomes):
            return [(False, outcomes)]
        return [(True, [o for o in outcomes if o.counted]), (False, plain)]

    def _fenced(self, name: str, items: list[dict[str, Any]], **extra: Any) -> Op[set[str]]:
        encoded = json.dumps(items)
        rows = yield self.ids_stmt(name, items=encoded, **extra)
        done = [str(row["id"]) for row in rows]
        if done:
            yield from self.then(name, ids=done, items=encoded, **extra)
        return set(done)

    def next_lease_expiry(self, types: list[str], runtime: str = "python") -> Op[float | None]:
        """Seconds until the first lease of ``types`` runs out (negative: it has), by the
        database's clock; ``None`` when no run of them is leased."""
        rows = yield self.stmt("next_lease_expiry", types=types, runtime=runtime)
        if not rows:
            return None
        seconds = rows[0]["seconds"]
        # No number: a lease end SQLite cannot read (written by hand); let the reaper
        # look, since it sorts first.
        return 0.0 if seconds is None else float(seconds)

    def reap_expired(
        self,
        types: list[str],
        limit: int,
        decide: Callable[[Mapping[str, Any]], Failure],
        runtime: str = "python",
    ) -> Op[list[Failure]]:
        """Turn expired leases of ``types`` (not owned by another runtime) into what
        ``decide`` says; return the outcomes recorded."""
        yield ATOMIC  # the expired rows stay locked until they are recorded
        rows = yield self.stmt("expired_leases", types=types, limit=limit, runtime=runtime)
        if not rows:
            return []
        failures = [decide(row) for row in rows]
        accepted = yield from self.finish(Outcomes(failed=failures), worker_id="")
        return [f for f in failures if f.run_id in accepted]


def _lease_items(leases: list[tuple[str, str]]) -> str:
    return json.dumps([{"id": run_id, "token": token} for run_id, token in leases])


def _failure(f: Failure) -> dict[str, Any]:
    return {
        "id": f.run_id,
        "token": f.token,
        "final": f.final,
        "delay": round(f.delay, 3),
        "error": f.error,
        "data": f.data,
        "charged": f.charged,
        "suspect": f.suspect,
        "crashes": f.crashes,
        "keep_place": f.keep_place,
        "trace": f.trace,
    }


def resumes(waiting_for: Any) -> Any:
    """What a claimed run resumes from: a run throttled at an earlier claim keeps the
    wait it was suspended in (if any) under ``resumes``; a step's throttle is a wait."""
    claim_throttle = isinstance(waiting_for, dict) and waiting_for.get("kind") == "throttle"
    if claim_throttle and "step" not in waiting_for:
        return waiting_for.get("resumes")
    return waiting_for
