"""Durable-execution verbs: read the journal, record steps, consume signals, take a rate
limit's token."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any

from simpleworkflow.backends.core import StoreCore, read_int
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.backends.records import RateToken, StepRecord
from simpleworkflow.models import JournalEntry


class JournalOps(StoreCore):
    def load_journal(self, run_id: str) -> Op[list[JournalEntry]]:
        rows = yield self.stmt("load_journal", run_id=run_id)
        return [
            JournalEntry(
                step_name=row["step_name"],
                kind=row["kind"],
                position=read_int(row["position"]),
                status=row["status"],
                output=self.read_json(row["output"]),
                attempts=read_int(row["attempts"]),
                completed_at=self.read_time(row["completed_at"]),
                started_at=self.read_time(row["started_at"]),
            )
            for row in rows
        ]

    def record_step(self, step: StepRecord) -> Op[bool]:
        """Journal a step with its events; False when the lease was lost (nothing written)."""
        rows = yield from self._record(step)
        return bool(rows)

    def record_steps(self, steps: list[StepRecord]) -> Op[set[tuple[str, str]]]:
        """Journal the steps of many runs in one transaction (group commit); return
        ``(run id, step name)`` of those whose lease was held."""
        if len(steps) == 1 or not self.dialect.skip_locked:
            if len(steps) > 1:
                yield ATOMIC  # one commit for the batch
            done = set()
            for step in steps:
                if (yield from self._record(step)):
                    done.add((step.run_id, step.name))
            return done
        items = [
            {
                "n": n,
                "run_id": step.run_id,
                "token": step.token,
                "name": step.name,
                "kind": step.kind,
                "position": step.position,
                "status": step.status,
                "output": step.output,
                "attempts": step.attempts,
                "started_at": None if step.started_at is None else step.started_at.isoformat(),
                "events": step.events,
            }
            for n, step in enumerate(steps)
        ]
        rows = yield self.stmt("record_steps", items=json.dumps(items))
        done = {(row["run_id"], row["step_name"]) for row in rows}
        # The batch skips runs whose row another transaction holds locked (see the
        # statement); one at a time, each of those waits for the lock, then is fenced.
        for step in steps:
            if (step.run_id, step.name) not in done and (yield from self._record(step)):
                done.add((step.run_id, step.name))
        return done

    def _record(self, step: StepRecord) -> Op[list[dict[str, Any]]]:
        events = json.dumps(step.events)
        rows = yield self.stmt(
            "record_step",
            run_id=step.run_id,
            token=step.token,
            name=step.name,
            kind=step.kind,
            position=step.position,
            status=step.status,
            output=step.output,
            attempts=step.attempts,
            started_at=step.started_at,
            events=events,
        )
        if rows:
            yield from self.then("record_step", run_id=step.run_id, events=events)
        return rows

    def trim_journal(self, run_id: str, token: str, names: list[str]) -> Op[bool]:
        """Delete these journal entries of the run (a loop's old iterations), fenced by the
        lease; False when the lease was lost (nothing deleted)."""
        if not self.dialect.chained_writes:
            yield ATOMIC  # the lease checked, then the rows deleted, in one transaction
        params = {"run_id": run_id, "token": token, "names": json.dumps(names)}
        rows = yield self.stmt("trim_journal", **params)
        if not (rows and rows[0]["held"]):
            return False
        yield from self.then("trim_journal", **params)
        return True

    def consume_signal(
        self, step: StepRecord, event: str, match: str | None
    ) -> Op[tuple[bool, Any, datetime | None] | None]:
        """Take the oldest unconsumed signal ``event`` whose payload contains ``match`` and
        journal it as ``step``'s output, in one transaction.

        Returns ``(True, payload, the time it was sent)``, ``None`` when no signal
        matches, and ``(False, None, None)`` when the lease was lost.
        """
        if self.dialect.chained_writes:  # one statement does it all
            rows = yield self.stmt(
                "consume_signal_journaled",
                run_id=step.run_id,
                token=step.token,
                name=step.name,
                kind=step.kind,
                position=step.position,
                attempts=step.attempts,
                started_at=step.started_at,
                events=json.dumps(step.events),
                event=event,
                match=match,
            )
            if not rows:
                return None
            payload = self.decode_json(rows[0]["payload"])
            sent_at = self._sent_at(rows[0])
            return (True, payload, sent_at) if rows[0]["saved"] else (False, None, None)
        yield ATOMIC  # the signal is consumed only if its step is journaled
        rows = yield self.stmt(
            "consume_signal",
            run_id=step.run_id,
            token=step.token,
            name=step.name,
            event=event,
            match=match,
        )
        if not rows:
            return None
        payload = self.decode_json(rows[0]["payload"])
        output = json.dumps({"signal": payload})
        saved = yield from self._record(dataclasses.replace(step, output=output))
        sent_at = self._sent_at(rows[0])
        return (True, payload, sent_at) if saved else (False, None, None)

    def _sent_at(self, row: dict[str, Any]) -> datetime | None:
        """When a signal was sent; ``None`` for a time that cannot be read (written by
        hand): the signal is consumed all the same, and only a race cannot order it."""
        sent_at = self.read_time(row["created_at"])
        return sent_at if isinstance(sent_at, datetime) else None

    def take_rate_token(self, step: StepRecord, limit: str, key: str | None) -> Op[RateToken]:
        """Take a token of rate limit ``limit`` (of ``key``'s window if the limit is per
        key) and journal ``step`` with it, in one transaction fenced by the lease."""
        if not self.dialect.chained_writes:
            yield ATOMIC  # the token is taken only if its step is journaled
        rows = yield self.stmt(
            "take_rate_token",
            run_id=step.run_id,
            token=step.token,
            name=step.name,
            kind=step.kind,
            position=step.position,
            output=step.output,
            limit=limit,
            key=key,
        )
        if self.dialect.chained_writes:  # one statement did it all
            row = rows[0]
            until = self.opt_time(row["next_window"])
            return RateToken(bool(row["granted"]), until, bool(row["known"]), bool(row["held"]))
        if not rows:  # a limit that does not exist, or the lease lost: nothing taken
            known = bool((yield self.stmt("get_rate_limit", name=limit)))
            return RateToken(False, known=known, held=not known)
        if not rows[0]["granted"]:
            return RateToken(False, self.decode_time(rows[0]["next_window"]))
        saved = bool((yield from self._record(step)))
        return RateToken(saved, held=saved)
