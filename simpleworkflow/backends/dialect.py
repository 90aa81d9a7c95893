"""What a store's SQL can do, declared once per backend instead of guessed from which
statements its ``queries.sql`` happens to define.

The verbs in ``run_ops``, ``worker_ops`` and ``journal_ops`` are shared; where a store
lacks something they choose another way by asking the backend's :class:`Dialect`. Both
``queries.sql`` files define the same statements apart from the follow-ups of a store
without chained writes and the ``own_statements`` each dialect names, with its reason
(``tests/unit/test_dialects.py`` holds them to that).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: The separator in a follow-up's name: ``cancel_run_then_1_events`` follows ``cancel_run``.
FOLLOWUP = "_then_"


@dataclass(frozen=True, slots=True)
class Dialect:
    """The capabilities of one store's SQL."""

    #: ``listen()`` hears every write of every process (LISTEN/NOTIFY). Without it a worker
    #: watches the file for changes and checks its leases itself before each durable call.
    has_notifications: bool
    #: A statement can pass over rows other transactions hold locked (``SKIP LOCKED``):
    #: claims use it, and ``record_steps`` journals a batch of runs in one statement.
    #: Without it (one writer at a time) a batch is journaled step by step in one commit.
    skip_locked: bool
    #: One statement can write several tables (data-modifying CTEs): a run's events go
    #: with its update, ``consume_signal_journaled`` takes a signal and journals it. Without
    #: it, a write's other tables are follow-up statements named ``<write>_then_<what>``,
    #: run in order in the same transaction.
    chained_writes: bool
    #: A new database gets its schema on first use (an embedded file nobody manages);
    #: otherwise schemas are created on purpose, with ``simpleworkflow migrate``.
    migrates_on_first_use: bool
    #: An update checks the whole row against the schema's checks (SQLite), so a run whose
    #: JSON was written with the checks off cannot be claimed by any statement; after a
    #: claim fails, ``fail_unparsable`` fails such runs (docs/workers.md).
    checks_whole_rows: bool = False
    #: Statements that only this store defines (follow-ups aside), each with its reason.
    own_statements: Mapping[str, str] = field(default_factory=dict)


def followups(names: list[str]) -> dict[str, list[str]]:
    """``{write: [its follow-ups in order]}`` among statement ``names``."""
    found: dict[str, list[str]] = {}
    for name in sorted(names):
        write, then, _ = name.partition(FOLLOWUP)
        if then:
            found.setdefault(write, []).append(name)
    return found
