"""Stores of runs, chosen by the URL's scheme."""

from __future__ import annotations

from simpleworkflow import config
from simpleworkflow.backends.base import Backend


def open_backend(
    url: str | None = None, *, schema: str | None = None, application_name: str | None = None
) -> Backend:
    """Open the store at ``url``; URL and schema resolve as :mod:`simpleworkflow.config` says.

    ``application_name`` names Postgres connections in ``pg_stat_activity`` (unless the
    URL names them); SQLite has no such thing."""
    resolved = config.database_url(url)
    if config.scheme(resolved) == "postgres":
        from simpleworkflow.backends.postgres import PostgresBackend

        return PostgresBackend(
            resolved, schema=config.schema_name(schema), application_name=application_name
        )
    from simpleworkflow.backends.sqlite import SQLiteBackend

    return SQLiteBackend(
        config.sqlite_path(resolved), synchronous=config.sqlite_synchronous(resolved)
    )


__all__ = ["Backend", "open_backend"]
