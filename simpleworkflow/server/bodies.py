"""Response bodies: the engine's records as the JSON that :mod:`schemas` declares.

Encoded with the standard library's encoder rather than pydantic's: payloads, results and
journal outputs may nest deeper than pydantic's serializer goes (255 levels), and every
stored one was written by this encoder, so it can be read back through the API. The
schemas still say what each body holds; the tests check the bodies against them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from starlette.responses import Response

from simpleworkflow.admin import TypeStats, registry_dict, step_states
from simpleworkflow.models import (
    Event,
    JournalEntry,
    RegistryEntry,
    Run,
    Signal,
    SignalSent,
    iso,
    shown,
)

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode``, with the C encoder it builds on every call built once (about
    1.5 µs a body). Without the check for circular values, which a body read from JSON
    or from the database cannot hold (one would fail on the depth instead)."""
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:  # an interpreter without the C accelerator
        return _ENCODER.encode
    encode = make(None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",",
                  False, False, False)  # fmt: skip

    def encoded(content: Any) -> str:
        return "".join(encode(content, 0))

    return encoded


_encode = _encoder()


def respond(content: Any, status: int = 200) -> Response:
    return Response(_encode(content), status_code=status, media_type="application/json")


def run(run: Run) -> dict[str, Any]:
    """A run (``created`` too when a start returned it)."""
    out = run.to_dict()
    out["waiting_states"] = run.waiting_states
    out["lease_expired"] = run.lease_expired
    return out


def started(run_: Run, warnings: list[str]) -> dict[str, Any]:
    """A run a start returned, with what may keep it from running (``StartedRun``)."""
    out = run(run_)
    out["warnings"] = warnings
    return out


def event(event: Event) -> dict[str, Any]:
    return event.to_dict()


def signal(signal: Signal) -> dict[str, Any]:
    return signal.to_dict()


def signal_sent(sent: SignalSent) -> dict[str, Any]:
    return {"signal_id": sent.signal_id, "woke": sent.woke}


def step(entry: JournalEntry, run: Run, now: datetime) -> dict[str, Any]:
    """A journaled call of ``run`` with its state as of ``now`` (``admin.step_states``)."""
    state = step_states.step_state(entry, run, now)
    return {
        "step_name": entry.step_name,
        "kind": entry.kind,
        "position": shown(entry.position),
        "status": state.status.value,
        "at": iso(state.at),
        "waiting_for": state.waiting_for,
        "output": shown(entry.output),
        "attempts": shown(entry.attempts),
        "started_at": iso(entry.started_at),
        "completed_at": iso(entry.completed_at),
        "duration_seconds": entry.duration,
    }


def registry(entry: RegistryEntry) -> dict[str, Any]:
    return registry_dict(entry)


def type_stats(stats: TypeStats) -> dict[str, Any]:
    return {**stats.to_dict(), "paused": stats.paused}
