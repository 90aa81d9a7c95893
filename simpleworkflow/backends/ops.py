"""The op protocol: how every backend verb asks for SQL, and how a backend answers.

An *op* is a generator that yields the SQL statements it needs and receives each one's
rows; a backend drives it inside one transaction (see :func:`drive`), blocking or
awaited, on its own connection or on a caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
Rows = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Statement:
    """One SQL statement with its named parameters."""

    sql: str
    params: Mapping[str, Any] = field(default_factory=dict)


Op = Generator[Statement, Rows, T]


#: Yielded first by an op whose statements must commit together (a row lock held from
#: one statement to the next, say). Other ops run each statement on its own, which on
#: Postgres saves the round trips of BEGIN and COMMIT.
ATOMIC = Statement("-- the statements that follow form one transaction")


@dataclass(frozen=True, slots=True)
class Stream(Statement):
    """Many statements, yielded as one: each one's rows go to ``take``, in order.

    The op builds each statement only when the driver asks for it, so a driver may send
    one and let the op build the next and take the rows of the last meanwhile (Postgres
    pipeline mode): the client's Python and the server's work overlap. The op receives
    no rows for the stream itself.

    ``session``, when given, says that the first statement only sets transaction-local
    settings, and is their form for a connection's whole session: a driver that keeps a
    connection for such streams alone may run it once and then leave the first out.
    """

    statements: Iterator[Statement] = field(kw_only=True)
    take: Callable[[Rows], None] = field(kw_only=True)
    session: Statement | None = field(default=None, kw_only=True)


def stream_in_turn(stream: Stream, run: Callable[[Statement], Rows]) -> None:
    """Drive a stream one statement at a time, for drivers that cannot overlap."""
    for statement in stream.statements:
        stream.take(run(statement))


def drive(
    op: Op[T],
    run: Callable[[Statement], Rows],
    first: Statement | None = None,
    stream: Callable[[Stream], None] | None = None,
) -> T:
    """Feed each statement an op yields to ``run`` until the op returns.

    ``first`` is a statement already taken from the op; ``ATOMIC`` markers are answered
    here, since the caller decided about the transaction before driving. ``stream``
    drives a :class:`Stream` (by default one statement after the other).
    """
    try:
        statement = next(op) if first is None else first
        while True:
            if statement is ATOMIC:
                rows: Rows = []
            elif isinstance(statement, Stream):
                if stream is None:
                    stream_in_turn(statement, run)
                else:
                    stream(statement)
                rows = []
            else:
                rows = run(statement)
            statement = op.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
