"""Which database to use: the argument, else ``SIMPLEWORKFLOW_DATABASE_URL``, else a local file."""

from __future__ import annotations

import os
import re
import urllib.parse

from simpleworkflow import errors

ENV_VAR = "SIMPLEWORKFLOW_DATABASE_URL"
SCHEMA_ENV_VAR = "SIMPLEWORKFLOW_SCHEMA"
LOG_FORMAT_ENV_VAR = "SIMPLEWORKFLOW_LOG_FORMAT"
#: The worker's log formats; the first is the default.
LOG_FORMATS = ("text", "json")
DEFAULT_URL = "sqlite:///simpleworkflow.db"
DEFAULT_SCHEMA = "workflow"
#: The values of a SQLite URL's ``synchronous`` option; the first is the default.
SQLITE_SYNCHRONOUS = ("full", "normal")


def database_url(url: str | None = None) -> str:
    """Resolve the database URL the way every entry point does."""
    return url or os.environ.get(ENV_VAR) or DEFAULT_URL


def schema_name(schema: str | None = None) -> str:
    """The Postgres schema: the argument, else ``SIMPLEWORKFLOW_SCHEMA``, else ``workflow``."""
    return schema or os.environ.get(SCHEMA_ENV_VAR) or DEFAULT_SCHEMA


def log_format(given: str | None = None) -> str:
    """The worker's log format: the argument, else ``SIMPLEWORKFLOW_LOG_FORMAT``, else
    ``text``; a value that is neither format is refused, saying which setting gave it."""
    value = given or os.environ.get(LOG_FORMAT_ENV_VAR) or LOG_FORMATS[0]
    if value.lower() not in LOG_FORMATS:
        where = "--log-format" if given else LOG_FORMAT_ENV_VAR
        raise errors.ConfigurationError(
            f"{where}={value!r}: the log formats are {' and '.join(LOG_FORMATS)}"
        )
    return value.lower()


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL (a ``?``
    starts the options that may follow it)."""
    path = url.removeprefix("sqlite://").partition("?")[0]
    if not path.startswith("/"):
        raise errors.ConfigurationError(
            f"cannot read SQLite URL {url!r}: write sqlite:///relative/path.db or "
            "sqlite:////absolute/path.db"
        )
    path = path[1:]
    if not path:
        raise errors.ConfigurationError(f"SQLite URL {url!r} names no file")
    return path


def sqlite_synchronous(url: str) -> str:
    """SQLite's ``synchronous`` setting: ``full`` unless the URL ends ``?synchronous=normal``.

    FULL syncs the write-ahead log at every commit, so an acknowledged start, step or
    outcome survives a power cut or an OS crash. NORMAL syncs it only at checkpoints: faster
    commits, and the last ones may be lost on a power cut (never on a crash of the process).
    """
    query = url.partition("?")[2]
    options = urllib.parse.parse_qs(query, keep_blank_values=True) if query else {}
    unknown = sorted(set(options) - {"synchronous"})
    if unknown:
        raise errors.ConfigurationError(
            f"unknown option {unknown[0]!r} in SQLite URL {url!r}; the one option is "
            "synchronous=full (the default) or synchronous=normal"
        )
    value = options.get("synchronous", ["full"])[-1].lower()
    if value not in SQLITE_SYNCHRONOUS:
        raise errors.ConfigurationError(
            f"synchronous={value!r} in SQLite URL {url!r}: use synchronous=full (the "
            "default: nothing acknowledged is lost on a power cut) or synchronous=normal "
            "(faster commits; the last ones may be lost on a power cut)"
        )
    return value


def scheme(url: str) -> str:
    """``"postgres"`` or ``"sqlite"``, or a :class:`ConfigurationError` saying what is known."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgres"
    if url.startswith("sqlite://"):
        return "sqlite"
    raise errors.ConfigurationError(
        f"unknown database URL {mask_url(url)!r}: use postgresql://user:pass@host/db or "
        f"sqlite:///path.db (set {ENV_VAR} or pass the URL)"
    )


#: Query parameters of a Postgres URL whose values are secrets (libpq's names).
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
MASK = "***"


def mask_url(url: str) -> str:
    """``url`` fit to print: the password in its user info and the values of secret query
    parameters (``?password=``) replaced by ``***``.

    Every URL the library shows (in a message, an error, a log line) goes through here.
    """
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # unreadable (a stray bracket): hide whatever follows a colon
        return re.sub(r"(//[^/@:]*):[^/@]*@", rf"\1:{MASK}@", url)
    # Text replaced in place: urlunsplit would rewrite what it need not (sqlite:///x.db).
    if parts.password:
        userinfo, _, host = parts.netloc.rpartition("@")
        masked = f"{userinfo.partition(':')[0]}:{MASK}@{host}"
        url = url.replace(f"//{parts.netloc}", f"//{masked}", 1)
    if parts.query:
        query = "&".join(_masked_parameter(item) for item in parts.query.split("&"))
        url = url.replace(f"?{parts.query}", f"?{query}", 1)
    return url


def _masked_parameter(item: str) -> str:
    name, equals, value = item.partition("=")
    if equals and value and urllib.parse.unquote(name).lower() in SECRET_PARAMETERS:
        return f"{name}={MASK}"
    return item


def describe(url: str | None = None, schema: str | None = None) -> str:
    """Which database a command or worker works on, for people: the SQLite file's absolute
    path, or the Postgres URL (credentials masked) and schema."""
    resolved = database_url(url)
    if scheme(resolved) == "sqlite":
        return sqlite_file(resolved) or "a private in-memory SQLite database"
    return f"{mask_url(resolved)} schema {schema_name(schema)}"


def sqlite_file(url: str) -> str | None:
    """The absolute path of a SQLite URL's file, without query parameters; ``None`` for
    ``sqlite:///:memory:``."""
    path = sqlite_path(url).partition("?")[0]
    return None if path == ":memory:" else os.path.abspath(path)
