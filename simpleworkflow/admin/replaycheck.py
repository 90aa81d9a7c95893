"""Replay the journals of unfinished runs against the current code, before a deploy.

Each unfinished run's body runs from the top with a context that answers durable calls
from the journal only: no step function is called and nothing is written. The replay
stops at the first call the journal cannot answer; it passes if every journaled step
was met on the way, and diverges when the code asks for a step the journal does not
have while journaled ones are still unmet. Code outside steps does run, as on every
resume, so keep side effects inside steps.

A patch (``ctx.patched``) is decided as a worker would, and noted instead of written; each
report lists the patches whose old side the run takes (journaled so, or decided so now),
so that an operator knows when a patch can be retired: once no run takes its old side.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from simpleworkflow import errors
from simpleworkflow.backends.records import Lease, RunQuery
from simpleworkflow.durable import execution, patches, scopes
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.holding import Holding
from simpleworkflow.durable.journal import Durable
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.durable.replay import Replay, answered
from simpleworkflow.models import JournalEntry

if TYPE_CHECKING:
    from simpleworkflow.backends import Backend
    from simpleworkflow.handlers import Handlers
    from simpleworkflow.models import Run

OK, DIVERGED, UNKNOWN_VERSION, NO_HANDLER, ERROR = (
    "ok",
    "diverged",
    "unknown version",
    "no handler",
    "error",
)


@dataclass(frozen=True, slots=True)
class ReplayReport:
    run_id: str
    type: str
    verdict: str
    detail: str = ""
    #: The patches (ids) whose old side this run takes, and whose new side it takes.
    old_side: tuple[str, ...] = ()
    new_side: tuple[str, ...] = ()


class _Frontier(BaseException):
    """The replay reached the first call its journal cannot answer."""


class _CheckingDurable(Durable):
    """Answers from the journal only; stops where the journal ends."""

    async def begin(self, name: str, kind: JournalKind, stopped: bool) -> JournalEntry | None:
        entry = await super().begin(name, kind, stopped)
        if not answered(entry) and kind not in scopes.CONTAINERS:  # judged by their branches
            raise _Frontier(name)
        return entry

    async def journal(self, name: str, kind: JournalKind, output: Any, **_: Any) -> None:
        if kind != JournalKind.PATCH:
            raise _Frontier(name)
        # A patch decided: noted as if journaled, and the replay goes on past it.
        self.remember(self.entry(name, kind, self.encode(name, output)))

    async def trim(self, names: list[str]) -> None:
        raise _Frontier(names[0])  # a write: the replay stops before it

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holding = _NoLease(self.lease, self.backend, None, None)


class _NoLease(Holding):
    """A replay holds no lease and writes nothing: there is no lease to check."""

    def fresh(self) -> bool:
        return True


async def check_runs(
    app: Handlers, backend: Backend, *, page_size: int = 500
) -> list[ReplayReport]:
    """Replay every unfinished run of ``app``'s types; one report per run with a journal."""
    reports = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        async for run in _unfinished(app, backend, page_size):
            report = await check_run(app, backend, run, executor)
            if report is not None:
                reports.append(report)
    return reports


async def check_run(
    app: Handlers,
    backend: Backend,
    run: Run,
    executor: concurrent.futures.Executor,
    timeout: float = 30.0,
) -> ReplayReport | None:
    """Replay one run; ``None`` when it has no journal yet (nothing can diverge)."""
    definition = app.definitions.get(run.type)
    if definition is None:
        return ReplayReport(run.id, run.type, NO_HANDLER, "no handler registered for the type")
    if (unknown := _unknown_version(run, definition.known_versions)) is not None:
        return unknown
    entries = await backend.execute_async(backend.load_journal(run.id), readonly=True)
    if not entries:
        return None
    lease = Lease(run=run, token="replay-check", claimed_at=backend.now())
    state = AttemptState(
        lease,
        "replay-check",
        backend,
        async_body=definition.is_async,
        durable_class=_CheckingDurable,
    )
    try:
        await asyncio.wait_for(execution.call(definition, run.payload, state, executor), timeout)
    except TimeoutError:
        detail = f"the body did not reach the end of its journal within {timeout:g}s"
        return ReplayReport(run.id, run.type, ERROR, detail)
    except (_Frontier, errors.Suspend, errors.RollingBack):
        pass  # a run rolling back replays only until it has registered its compensations
    except errors.ContinueAsNew:
        # Continuing ends the body: every journaled call must have been met by then (a
        # body that continued before any durable call has not read its journal yet).
        await state.durable.load()
    except errors.ReplayDivergence as exc:
        return ReplayReport(run.id, run.type, DIVERGED, str(exc))
    except Exception as exc:
        replay = state.durable.replay
        if replay is None or not replay.rolling_back:  # else: the error it rolls back for
            return ReplayReport(run.id, run.type, ERROR, f"{type(exc).__name__}: {exc}")
    return _verdict(run, entries, state.durable.replay)


def _unknown_version(run: Run, known: Sequence[str]) -> ReplayReport | None:
    """The report of a run started on a code version this code does not know, if it was."""
    if run.code_version is None or run.code_version in known:
        return None
    detail = f"started on code version {run.code_version!r}; this code knows {', '.join(known)}"
    return ReplayReport(run.id, run.type, UNKNOWN_VERSION, detail)


def _verdict(run: Run, entries: list[JournalEntry], replay: Replay | None) -> ReplayReport:
    """What a replay that ended without an error says: journaled calls it never met
    diverge; otherwise ok, with the sides of the patches it met."""
    unmet = replay.unmet if replay is not None else []
    if unmet:
        detail = f"the code no longer reaches journaled steps {', '.join(map(repr, unmet[:5]))}"
        return ReplayReport(run.id, run.type, DIVERGED, detail)
    old, new = _sides(entries, replay.patches() if replay is not None else [])
    detail = f"takes the old side of patch {', '.join(map(repr, old))}" if old else ""
    return ReplayReport(run.id, run.type, OK, detail, old, new)


def _sides(
    journaled: list[JournalEntry], decided: list[JournalEntry]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The ids of the patches a run takes the old side of, and the new side of."""
    sides = {e.step_name: patches.decision(e) for e in journaled if e.kind == JournalKind.PATCH}
    sides.update((e.step_name, patches.decision(e)) for e in decided)
    old = tuple(sorted(patches.patch_id(n) for n, new in sides.items() if not new))
    new = tuple(sorted(patches.patch_id(n) for n, new in sides.items() if new))
    return old, new


async def _unfinished(app: Handlers, backend: Backend, page_size: int) -> Any:
    types = set(app.definitions)
    cursor: tuple[datetime, str] | None = None
    while True:
        query = RunQuery(
            statuses=("pending", "leased"),
            limit=page_size,
            after_created_at=None if cursor is None else cursor[0],
            after_id=None if cursor is None else cursor[1],
        )
        runs = await backend.execute_async(backend.list_runs(query), readonly=True)
        for run in runs:
            if run.type in types:
                yield run
        if len(runs) < page_size:
            return
        cursor = (runs[-1].created_at, runs[-1].id)


def check(app: Handlers, backend: Backend) -> list[ReplayReport]:
    """Blocking form of :func:`check_runs`."""
    return asyncio.run(check_runs(app, backend))
