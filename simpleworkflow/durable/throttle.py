"""A step's rate limit: ``ctx.rate_limit("partner-api")`` takes a token of a named limit
before the body goes on, or suspends the run until the limit's next window opens.

The token comes from the same window row as the claims of the types that obey the limit
(docs/flow-control.md), in one statement that also journals it: a replay finds the entry
and takes no second token. A call with no token left writes nothing to the journal; the
run gives its lease back, due when the next window opens, and on resume the same call
(same name, same place in the journal) tries again.
"""

from __future__ import annotations

import time

from simpleworkflow import errors, names, rates
from simpleworkflow.backends.records import RateToken
from simpleworkflow.durable import races
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.journal import Durable
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.models import JournalEntry


def check(limit: object, key: object, name: object) -> tuple[str, str | None, str]:
    """The limit's name, the key and the call's step name (``rate:<limit>`` by default),
    checked before anything is read or written."""
    limit = rates.check_name(limit)
    key = names.validate_key(key, "a rate limit's key")
    step = names.validate_step_name(f"rate:{limit}" if name is None else name)
    return limit, key, step


async def take(state: AttemptState, unique: str, limit: str, key: str | None) -> None:
    """Take a token of ``limit`` as step ``unique``, or suspend the run until the next
    window; an :class:`~simpleworkflow.errors.InvalidArgument` into the body for a limit
    that does not exist (nothing taken, nothing journaled)."""
    durable = state.durable
    entry = await durable.begin(unique, JournalKind.RATE_LIMIT, state.is_cancelled())
    if entry is not None:
        return  # journaled: the token was taken by an earlier attempt
    # Per key, a call without a key of its own counts under the run's concurrency key,
    # as the run's claims do.
    key = state.run.concurrency_key if key is None else key
    token = await take_token(durable, unique, limit, key)
    if not token.known:
        raise errors.InvalidArgument(
            f"there is no rate limit named {limit!r}; create it first "
            f"(admin.set_rate_limit, or `simpleworkflow limits set {limit} 10/s`)"
        )
    if token.granted:
        races.note_now(durable.db_now)
        return
    assert token.until is not None
    until = token.until.isoformat()
    data = {"rate_limit": limit} if key is None else {"rate_limit": limit, "key": key}
    raise durable.waits.suspend(
        errors.Suspend(
            unique,
            "throttled",
            data=data,
            waiting_for={"kind": "throttle", "step": unique, **data, "until": until},
            run_at=token.until,
        )
    )


async def take_token(durable: Durable, name: str, limit: str, key: str | None) -> RateToken:
    """Take a token of rate limit ``limit`` (per ``key``) and journal it as step
    ``name`` in one fenced transaction; or learn when the next window opens."""
    text = durable.encode(name, {"rate_limit": limit, "key": key})
    record = durable.entry(name, JournalKind.RATE_LIMIT, text, events=[])
    backend = durable.backend
    began = time.monotonic()
    got = await durable.once(
        name, lambda: backend.execute_async(backend.take_rate_token(record, limit, key))
    )
    if isinstance(got, JournalEntry):
        return RateToken(True)
    if not got.held:
        raise errors.LeaseLost(name)
    durable.holding.held_since(began)
    if got.granted:
        durable.remember(record)
    return got
