"""Durable waits for signals (``ctx.wait_for_event``): the oldest stored signal that
matches is taken and journaled as the wait's output in one fenced transaction, so a
signal sent before the wait began counts too, and no two waits take the same one.

The wait is journaled as it begins (``retrying``, with its timeout): a replay keeps the
same deadline. With no signal stored yet the run is suspended until one is sent, or the
timeout passes.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from typing import Any

from simpleworkflow import errors, observe
from simpleworkflow.durable import races
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.journal import Durable
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.durable.suspension import FOREVER, whole_ms
from simpleworkflow.models import JournalEntry


async def wait_for_event(
    state: AttemptState,
    name: str,
    event: str,
    match: Any,
    match_text: str | None,
    timeout: float | None,
    hint: Any = None,
) -> Any:
    """Wait ``name`` for signal ``event`` containing ``match`` (``match_text``, as JSON):
    its payload (read as type ``hint``, if given), or ``None`` once ``timeout`` seconds
    have passed."""
    durable = state.durable
    unique = durable.name(name)
    entry = await durable.begin(unique, JournalKind.WAIT, state.is_cancelled())
    if entry is not None and entry.status == "completed":
        return _typed(durable, entry.output.get("signal"), hint, event)
    if entry is None:
        until = (
            FOREVER if timeout is None else whole_ms(durable.db_now() + timedelta(seconds=timeout))
        )
        started = {"until": until.isoformat(), "event": event}
        await durable.journal(unique, JournalKind.WAIT, started, status="retrying", events=[])
    else:
        until = datetime.fromisoformat(entry.output["until"])
    got = await consume_signal(durable, unique, event, match_text)
    if got is not None:
        if state.observers:
            state.observers.signal_consumed(observe.SignalConsumed(state.run, event))
        return _typed(durable, got["signal"], hint, event)
    if durable.db_now() >= until:
        await durable.journal(unique, JournalKind.WAIT, {"timeout": True}, events=[])
        races.note(until)  # the timeout happened then
        return None
    waiting: dict[str, Any] = {"kind": "signal", "step": unique, "event": event}
    if match is not None:  # as written (a codec's datetimes as text), for the outcome
        waiting["match"] = match if durable.codec is None else json.loads(match_text or "null")
    if timeout is not None:
        waiting["until"] = until.isoformat()
    raise durable.waits.suspend(
        errors.Suspend(unique, "waiting", data={"event": event}, waiting_for=waiting, run_at=until)
    )


def _typed(durable: Durable, payload: Any, hint: Any, event: str) -> Any:
    """A signal's payload as the wait's ``type=`` reads it: the same JSON, so the same
    value, on the first run as on a replay (none on a timeout)."""
    if hint is None or payload is None:
        return payload
    return durable.typed(payload, hint, f"payload of signal {event!r}")


async def consume_signal(
    durable: Durable, name: str, event: str, match: str | None
) -> dict[str, Any] | None:
    """Take the oldest stored signal ``event`` whose payload contains ``match`` (JSON
    text) and journal it as wait ``name``'s output, in one fenced transaction.
    Returns that output, or ``None`` when no such signal is stored."""
    replay = await durable.load()
    record = durable.entry(name, JournalKind.WAIT, None, events=[])
    backend = durable.backend
    began = time.monotonic()
    got = await durable.once(
        name, lambda: backend.execute_async(backend.consume_signal(record, event, match))
    )
    if isinstance(got, JournalEntry):
        return dict(got.output)
    if got is None:
        return None
    held, payload, sent_at = got
    if not held:
        raise errors.LeaseLost(name)
    durable.holding.held_since(began)
    races.note(sent_at)  # a race is won by the signal sent first, not read first
    output = {"signal": payload}
    copy = json.loads(json.dumps(output))  # the journal's, whatever the body does with its own
    replay.remember(JournalEntry(name, JournalKind.WAIT, record.position, "completed", copy, 1))
    return output
