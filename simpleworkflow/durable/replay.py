"""Replay state of one attempt: which journaled steps the body has met again, and names.

Pure bookkeeping, no I/O: the body runs from the top on every resume, and each durable
call asks this object whether its step is journaled. A step the journal does not hold
may only run once every journaled step has been met again; otherwise the code has
changed under the run, and :class:`~simpleworkflow.errors.ReplayDivergence` names it.
"""

from __future__ import annotations

from simpleworkflow import errors
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.models import JournalEntry, unreadable_fields

#: The kinds of journal entry this version writes, and so can replay.
KINDS = frozenset(JournalKind)
STATUSES = frozenset({"completed", "retrying"})
#: The journal entry that says the run failed for good and rolls back (see ``compensations``).
ROLLBACK_STEP = "@rollback"
#: The path of the steps that run a run's compensations.
COMPENSATION_PATH = "rollback/"


def check_readable(run_id: str, entries: list[JournalEntry]) -> None:
    """Raise :class:`~simpleworkflow.errors.UnreadableRow` for a journal this worker
    cannot replay: a value it cannot read, or a kind or status it does not know (written
    by plain SQL or another runtime). Replaying past it would guess."""
    problems: dict[str, dict[str, str]] = {}
    for entry in entries:
        where = f"step {entry.step_name!r}"
        for name, value in unreadable_fields(entry).items():
            problems[f"{where} {name}"] = value.to_dict()
        if entry.kind not in KINDS:
            problems[f"{where} kind"] = {"raw": str(entry.kind), "reason": "unknown kind"}
        if entry.status not in STATUSES:
            problems[f"{where} status"] = {"raw": str(entry.status), "reason": "unknown status"}
    if problems:
        named = "; ".join(f"{k} holds {v['raw']!r} ({v['reason']})" for k, v in problems.items())
        raise errors.UnreadableRow(
            f"the journal of run {run_id} cannot be replayed: {named}. It was written by "
            "plain SQL or another runtime; correct or delete the row, then retry the run",
            problems,
        )


def gave_up(entry: JournalEntry) -> bool:
    """True for a step journaled as out of attempts: replays raise its StepFailed again."""
    return (
        entry.kind == JournalKind.STEP
        and isinstance(entry.output, dict)
        and "gave_up" in entry.output
    )


def answered(entry: JournalEntry | None) -> bool:
    """True when the journal answers the call without running anything."""
    return entry is not None and (entry.status == "completed" or gave_up(entry))


def compensation(name: str) -> bool:
    """Whether step ``name`` runs a compensation (see ``compensations``)."""
    return name.startswith(COMPENSATION_PATH)


class Replay:
    def __init__(self, entries: list[JournalEntry]) -> None:
        self._entries = {entry.step_name: entry for entry in entries}
        # A patch's marker need not be met again: code that no longer asks (its patch
        # retired) replays the same steps (see ``patches``).
        self._unmet = {e.step_name for e in entries if answered(e) and e.kind != JournalKind.PATCH}
        self._next_position = max((e.position for e in entries), default=-1) + 1
        #: The run failed for good and rolls back: its body replays only to register its
        #: compensations again, and the compensations' own entries are not the body's.
        self.rolling_back = ROLLBACK_STEP in self._entries
        self._counts: dict[JournalKind, int] = {}
        if self.rolling_back:
            self._unmet = {n for n in self._unmet if n != ROLLBACK_STEP and not compensation(n)}

    def lookup(self, name: str, kind: JournalKind) -> JournalEntry | None:
        """The journal entry of this step, if any, marked as met."""
        entry = self._entries.get(name)
        if entry is None:
            return None
        if entry.kind != kind:
            raise errors.ReplayDivergence(
                f"step {name!r} is journaled as a {entry.kind} but the code now makes it a "
                f"{kind}; keep step names stable, or start new runs on a new version"
            )
        self._unmet.discard(name)
        return entry

    def check_new(self, name: str) -> None:
        """Raise if a step that is not journaled comes while journaled ones are unmet."""
        if self._unmet:
            expected = sorted(self._unmet, key=lambda n: self._entries[n].position)
            raise errors.ReplayDivergence(
                f"step {name!r} comes where this run's journal expects "
                f"{', '.join(repr(n) for n in expected[:5])}; the workflow code changed "
                "under a running workflow (renamed, removed or reordered steps)"
            )

    def position(self, name: str) -> int:
        """Where a step first ran: kept from the journal, else the next free position."""
        entry = self._entries.get(name)
        if entry is not None:
            return entry.position
        position = self._next_position
        self._next_position += 1
        return position

    def meet(self, names: list[str]) -> None:
        """Count steps as met without looking them up (the branches a race cancelled)."""
        self._unmet.difference_update(names)

    def journaled(self, name: str) -> JournalEntry | None:
        """The entry of ``name`` if the journal holds one; marks nothing as met."""
        return self._entries.get(name)

    def of_kind(self, kind: JournalKind) -> list[JournalEntry]:
        """The entries of ``kind``, in the order they were first journaled."""
        found = [e for e in self._entries.values() if e.kind == kind]
        return sorted(found, key=lambda e: e.position)

    def count(self, kind: JournalKind) -> int:
        """How many entries of ``kind`` the journal held when it was read."""
        if kind not in self._counts:
            self._counts[kind] = sum(1 for e in self._entries.values() if e.kind == kind)
        return self._counts[kind]

    def remember(self, entry: JournalEntry) -> None:
        """Record an entry written during this attempt (so a later lookup finds it)."""
        self._entries[entry.step_name] = entry

    def patches(self) -> list[JournalEntry]:
        """The patch decisions this replay holds (journaled, or made since)."""
        return [e for e in self._entries.values() if e.kind == JournalKind.PATCH]

    def under(self, prefix: str) -> list[JournalEntry]:
        """The entries whose name starts with ``prefix`` (a loop's or a join's rows)."""
        return [e for name, e in self._entries.items() if name.startswith(prefix)]

    def forget(self, names: list[str]) -> None:
        """Drop entries the attempt has deleted from the journal (a loop's trimmed rows)."""
        for name in names:
            self._entries.pop(name, None)
            self._unmet.discard(name)

    @property
    def unmet(self) -> list[str]:
        return sorted(self._unmet, key=lambda n: self._entries[n].position)
