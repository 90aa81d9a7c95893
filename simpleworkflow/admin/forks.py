"""Forking a run from a step (``admin.fork``): where in the original's journal the fork
starts, and whether it is safe to start there, decided from the original's row and
journal inside the transaction that then copies the entries (``fork_run``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simpleworkflow import errors
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.models import JournalEntry, Run

#: How many of the run's step names a :class:`~simpleworkflow.errors.StepNotFound` lists.
NAMES_SHOWN = 50
ROLLBACK_PREFIX = "rollback/"


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """The journal entry a fork starts at: it and everything after it run again."""

    step: str
    position: int


def check_from_step(value: object) -> str | int:
    """A step's name or a journal position, as ``from_step`` takes it."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise errors.InvalidArgument(
            f"from_step must be a step's name or its journal position (an int), "
            f"not {type(value).__name__}"
        )
    if isinstance(value, str) and not value:
        raise errors.InvalidArgument("from_step must not be empty: give a step's name")
    return value


def fork_point(run: Run, journal: Sequence[JournalEntry], from_step: str | int) -> ForkPoint:
    """Where a fork of ``run`` from ``from_step`` starts, or why it may not."""
    if not run.is_terminal:
        raise errors.ForkRefused(
            run.id,
            f"it is {run.status_text}, and a run still under way changes its journal; "
            "fork a run that has finished (succeeded, failed or cancelled): wait for it, "
            "or cancel it first",
        )
    entry = _find(journal, from_step)
    if entry is None:
        names = [item.step_name for item in journal]
        if len(names) > NAMES_SHOWN:
            names = [*names[:NAMES_SHOWN], f"... {len(names) - NAMES_SHOWN} more"]
        raise errors.StepNotFound(run.id, from_step, names)
    name = entry.step_name
    if "/" in name or entry.kind == JournalKind.ROLLBACK:
        raise errors.ForkRefused(
            run.id,
            f"step {name!r} is inside a loop iteration, a join branch, a compensation or "
            "the rollback phase, which replay only as a whole; fork from the loop or join "
            "itself (it runs again whole) or from a step before it",
        )
    kept = [item for item in journal if item.position < entry.position and _copied(item, name)]
    started = sum(item.kind == JournalKind.CHILD for item in kept)
    waited = sum(item.kind == JournalKind.CHILD_RESULT for item in kept)
    if started > waited:
        raise errors.ForkRefused(
            run.id,
            f"before step {name!r} it started {started} child run(s) and has the outcome "
            f"of {waited}: the fork would wait for a child that is not its own (a child "
            "wakes only its parent); fork from the start of the child or earlier, and the "
            "fork starts a child of its own",
        )
    return ForkPoint(name, entry.position)


def _find(journal: Sequence[JournalEntry], from_step: str | int) -> JournalEntry | None:
    for item in journal:
        if (
            item.step_name == from_step
            if isinstance(from_step, str)
            else item.position == from_step
        ):
            return item
    return None


def _copied(item: JournalEntry, point: str) -> bool:
    """Whether ``fork_run`` copies ``item`` for a fork at ``point`` (as its SQL does)."""
    name = item.step_name
    return (
        item.kind != JournalKind.ROLLBACK
        and not name.startswith(ROLLBACK_PREFIX)
        and not name.startswith(point + "/")
    )
