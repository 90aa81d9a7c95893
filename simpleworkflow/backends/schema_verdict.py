"""Whether a database's schema fits this code: the one place that decides, and says why not
(the faces that run ops once it fits are in ``op_runner``).

Clients, workers and CLI commands all read the applied schema version before their first
call. Here alone is it compared with the code's, and decided whether to migrate now (an
embedded SQLite file, or ``auto_migrate=True``) or to refuse with a
:class:`~simpleworkflow.errors.SchemaError` that tells how to fix it.
"""

from __future__ import annotations

import asyncio

from simpleworkflow import errors
from simpleworkflow.backends.base import Backend


def auto_migrates(backend: Backend, auto_migrate: bool | None) -> bool:
    """The embedded store creates its schema on first use; Postgres schemas are managed
    on purpose, with ``simpleworkflow migrate``."""
    return backend.dialect.migrates_on_first_use if auto_migrate is None else auto_migrate


def needs_migration(backend: Backend, version: int | None, *, auto_migrate: bool) -> bool:
    """True when the schema must be migrated before use; raise when that is not allowed."""
    latest = backend.latest_version
    if version is not None and version >= latest:
        return False
    if auto_migrate:
        return True
    if version is None:
        raise errors.SchemaError(
            f"the {backend.name} database has no simpleworkflow schema yet; "
            "create it with `simpleworkflow migrate` (or `simpleworkflow migrate --sql` "
            "to see the SQL)"
        )
    raise errors.SchemaError(
        f"the {backend.name} database schema is at version {version}, older than "
        f"version {latest} which this simpleworkflow needs; upgrade it with "
        "`simpleworkflow migrate`"
    )


def ensure(backend: Backend, *, auto_migrate: bool | None = None) -> int | None:
    """Make the schema fit, migrating if allowed; return the version found (``None``: the
    database had no schema, and has one now)."""
    version = backend.execute(backend.schema_version(), readonly=True)
    if needs_migration(backend, version, auto_migrate=auto_migrates(backend, auto_migrate)):
        backend.migrate()
    return version


async def ensure_async(backend: Backend, *, auto_migrate: bool | None = None) -> int | None:
    """:func:`ensure`, without blocking the event loop."""
    version = await backend.execute_async(backend.schema_version(), readonly=True)
    if needs_migration(backend, version, auto_migrate=auto_migrates(backend, auto_migrate)):
        await asyncio.to_thread(backend.migrate)
    return version


def check_joined(backend: Backend, version: int | None) -> None:
    """Refuse a call inside a caller's transaction (``connection=``) on a schema that
    does not fit: it never migrates, since a migration beside an open transaction of the
    caller's could wait for that transaction, which waits for the call."""
    try:
        needs_migration(backend, version, auto_migrate=False)
    except errors.SchemaError as exc:
        raise errors.SchemaError(
            f"{exc}. A call with connection= never migrates: migrate before it "
            "(client.migrate(), or any call without connection=)"
        ) from None
