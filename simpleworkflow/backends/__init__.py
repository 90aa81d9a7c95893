"""Stores of runs, chosen by the URL's scheme."""

from __future__ import annotations

from simpleworkflow import config
from simpleworkflow.backends.base import Backend


def open_backend(url: str | None = None, *, schema: str | None = None) -> Backend:
    """Open the store at ``url``; URL and schema resolve as :mod:`simpleworkflow.config` says."""
    resolved = config.database_url(url)
    if config.scheme(resolved) == "postgres":
        from simpleworkflow.backends.postgres import PostgresBackend

        return PostgresBackend(resolved, schema=config.schema_name(schema))
    from simpleworkflow.backends.sqlite import SQLiteBackend

    return SQLiteBackend(
        config.sqlite_path(resolved), synchronous=config.sqlite_synchronous(resolved)
    )


__all__ = ["Backend", "open_backend"]
