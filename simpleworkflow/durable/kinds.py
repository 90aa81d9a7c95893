"""What a journal row records: the one vocabulary of journal kinds.

A ``str`` enum, so that a member is its value wherever it goes (a statement's parameter,
JSON, a comparison with a row read back): the values are the strings the journal's
``kind`` column holds, and must never change (rows written by earlier versions, and by
plain SQL, replay by them).
"""

from __future__ import annotations

import enum


class JournalKind(enum.StrEnum):
    """The durable call a journal entry answers."""

    STEP = "step"  # ctx.step and ctx.transaction
    SLEEP = "sleep"
    WAIT = "wait"  # ctx.wait_for_event
    CHILD = "child"  # ctx.start_child
    CHILD_RESULT = "child_result"  # ctx.wait_child
    RACE = "race"
    NOW = "now"
    UUID = "uuid"
    RANDOM = "random"
    RATE_LIMIT = "rate_limit"
    PATCH = "patch"  # ctx.patched: which side of a code change the run is on
    LOOP = "loop"  # ctx.loop: its result
    LOOP_STATE = "loop_state"  # ctx.loop: the state committed before an iteration
    JOIN = "join"  # ctx.join: every branch's result
    JOIN_BRANCH = "join_branch"  # ctx.join: one branch's result
    ON_ROLLBACK = "on_rollback"  # ctx.on_rollback: a compensation registered
    ROLLBACK = "rollback"  # the run failed for good and rolls back: its error, kept
    VALUE = "value"  # ctx.set_value: a value the run published
    STREAM = "stream"  # ctx.stream_append / ctx.stream_close from the body
