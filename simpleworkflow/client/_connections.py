"""What ``connection=`` takes besides a driver's own connection (psycopg's, ``sqlite3``'s):
SQLAlchemy's, unwrapped to the driver connection that runs its transaction.

SQLAlchemy is recognised by the module of its types and never imported: it is no
dependency. A ``Session`` gives its ``Connection`` (``session.connection()``, which joins
the session's transaction), a ``Connection`` its DBAPI connection's
``driver_connection``: with the ``postgresql+psycopg`` dialect a psycopg connection,
with ``sqlite`` a ``sqlite3.Connection``. The async faces (``AsyncSession``,
``AsyncConnection``) give the same, awaited where SQLAlchemy needs it.
"""

from __future__ import annotations

from typing import Any

from simpleworkflow import errors


def driver_connection(connection: Any) -> Any:
    """The driver connection under a SQLAlchemy ``Connection`` or ``Session``, else
    ``connection`` itself (the backend checks it)."""
    if not _from_sqlalchemy(connection):
        return connection
    if hasattr(connection, "sync_session") or hasattr(connection, "sync_connection"):
        raise errors.InvalidArgument(
            "a SQLAlchemy AsyncSession or AsyncConnection goes with an AsyncClient; a "
            "Client takes a Session or a Connection"
        )
    if hasattr(connection, "get_bind"):  # a Session (or a scoped_session)
        connection = connection.connection()
    return _driver(connection)


async def driver_connection_async(connection: Any) -> Any:
    """:func:`driver_connection` for the async client: an ``AsyncSession`` or an
    ``AsyncConnection`` gives its async driver connection."""
    if not _from_sqlalchemy(connection):
        return connection
    if hasattr(connection, "sync_session"):  # an AsyncSession
        connection = await connection.connection()
    if hasattr(connection, "sync_connection"):  # an AsyncConnection
        if connection.sync_connection is None:
            raise errors.InvalidArgument(
                "the SQLAlchemy AsyncConnection given is not connected yet: use it "
                "inside `async with engine.connect() as conn:` (or engine.begin())"
            )
        connection = connection.sync_connection
    return _driver(connection)


def _from_sqlalchemy(connection: Any) -> bool:
    return type(connection).__module__.startswith("sqlalchemy.")


def _driver(connection: Any) -> Any:
    try:
        return connection.connection.driver_connection
    except AttributeError:
        raise errors.InvalidArgument(
            "connection= takes a SQLAlchemy Connection or Session (or the driver's own "
            f"connection), not {type(connection).__module__}.{type(connection).__qualname__}"
        ) from None
