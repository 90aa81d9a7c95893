"""Which database to use: the argument, else ``SIMPLEWORKFLOW_DATABASE_URL``, else a local file."""

from __future__ import annotations

import os

from simpleworkflow import errors

ENV_VAR = "SIMPLEWORKFLOW_DATABASE_URL"
SCHEMA_ENV_VAR = "SIMPLEWORKFLOW_SCHEMA"
DEFAULT_URL = "sqlite:///simpleworkflow.db"
DEFAULT_SCHEMA = "workflow"


def database_url(url: str | None = None) -> str:
    """Resolve the database URL the way every entry point does."""
    return url or os.environ.get(ENV_VAR) or DEFAULT_URL


def schema_name(schema: str | None = None) -> str:
    """The Postgres schema: the argument, else ``SIMPLEWORKFLOW_SCHEMA``, else ``workflow``."""
    return schema or os.environ.get(SCHEMA_ENV_VAR) or DEFAULT_SCHEMA


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL."""
    path = url.removeprefix("sqlite://")
    if not path.startswith("/"):
        raise errors.ConfigurationError(
            f"cannot read SQLite URL {url!r}: write sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    path = path[1:]
    if not path:
        raise errors.ConfigurationError(f"SQLite URL {url!r} names no file")
    return path


def scheme(url: str) -> str:
    """``"postgres"`` or ``"sqlite"``, or a :class:`ConfigurationError` saying what is known."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgres"
    if url.startswith("sqlite://"):
        return "sqlite"
    raise errors.ConfigurationError(
        f"unknown database URL {url!r}: use postgresql://user:pass@host/db or "
        f"sqlite:///path.db (set {ENV_VAR} or pass the URL)"
    )
