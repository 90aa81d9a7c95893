"""Loading a backend's named SQL statements from its ``queries.sql`` file.

Each statement starts with a ``-- name: <name>`` line; everything until the next such
line belongs to it. Tables are written as ``{schema}workflow_run``: ``{schema}`` becomes the
quoted schema name and a dot (nothing on SQLite), ``{schema_name}`` the quoted name
alone and ``{schema_text}`` the name inside a string literal (a wake-up's, which says
the schema as ``tg_table_schema`` does); that name, checked to be lowercase letters,
digits and ``_``, is the only text Python ever puts into SQL.

Comments and blank lines are dropped as a statement is loaded: they are for readers of
the file, and psycopg keeps its parse of a statement (``%(name)s`` to ``$1``) only for
statements up to 4,096 characters, so the plain claim would otherwise be parsed per call.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_SCHEMA = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: A quoted string or identifier (kept as it is), or a comment with the blanks before it
#: (dropped): whichever starts first, so that a quote inside a comment or two dashes
#: inside a string are read as what they are in.
_COMMENT = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|[ \t]*--[^\n]*""")
#: The same, with a line break that ends a blank line (dropped) in place of a comment.
_BLANK = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|\n[ \t]*(?=\n)""")


def quote_schema(schema: str) -> str:
    """Return ``schema`` as a quoted SQL identifier, after checking it is a plain name."""
    if not _SCHEMA.match(schema):
        from simpleworkflow import errors

        raise errors.ConfigurationError(
            f"invalid schema name {schema!r}: use lowercase letters, digits and '_', "
            "starting with a letter or '_', at most 63 characters"
        )
    return f'"{schema}"'


def render(text: str, quoted_schema: str | None) -> str:
    """Fill in the schema placeholders; ``None`` (SQLite) means tables have no schema."""
    if quoted_schema is None:
        return text.replace("{schema}", "")
    bare = quoted_schema[1:-1]  # see quote_schema: nothing in it needs quoting
    text = text.replace("{schema_text}", bare).replace("{schema_name}", quoted_schema)
    return text.replace("{schema}", quoted_schema + ".")


def load(package: str, filename: str, quoted_schema: str | None) -> dict[str, str]:
    """Parse ``filename`` in ``package`` into ``{name: sql}``, schema filled in."""
    text = resources.files(package).joinpath(filename).read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice in {package}/{filename}")
        queries[name] = render(compact(body).strip().rstrip(";"), quoted_schema)
    return queries


def read(package: str, filename: str, quoted_schema: str | None) -> str:
    """Return a whole SQL file (a migration, the reference schema) with the schema filled in."""
    return render(resources.files(package).joinpath(filename).read_text(), quoted_schema)


def migration_files(package: str) -> list[tuple[int, str]]:
    """The numbered migrations of a backend, ``[(version, filename), ...]`` in order."""
    folder = resources.files(package).joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = re.match(r"^(\d{4})_[a-z0-9_]+\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), f"migrations/{entry.name}"))
    found.sort()
    return found


def compact(sql: str) -> str:
    """``sql`` without its comments and blank lines; text inside quotes untouched."""

    def keep(match: re.Match[str]) -> str:
        token = match.group()
        return token if token[0] in "'\"" else ""

    return _BLANK.sub(keep, _COMMENT.sub(keep, sql))
