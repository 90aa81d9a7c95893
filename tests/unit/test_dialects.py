"""Both stores define the same SQL statements, apart from what each dialect declares.

A statement added to one ``queries.sql`` and forgotten in the other fails here, not in
production on the other store; a statement only one store needs must say why, in its
backend's ``Dialect``.
"""

from __future__ import annotations

import pytest

from simpleworkflow.backends import postgres, queries, sqlite
from simpleworkflow.backends.dialect import FOLLOWUP, Dialect, followups

STORES = {
    "postgres": (postgres.DIALECT, queries.load(postgres.__name__, "queries.sql", '"workflow"')),
    "sqlite": (sqlite.DIALECT, queries.load(sqlite.__name__, "queries.sql", None)),
}


def _shared(dialect: Dialect, names: set[str]) -> set[str]:
    """The statement names that the other store must define too."""
    return {n for n in names if n not in dialect.own_statements and FOLLOWUP not in n}


def test_both_stores_define_the_same_statements_apart_from_declared_ones() -> None:
    (pg_dialect, pg), (lite_dialect, lite) = STORES["postgres"], STORES["sqlite"]
    only_postgres = _shared(pg_dialect, set(pg)) - set(lite)
    only_sqlite = _shared(lite_dialect, set(lite)) - set(pg)
    assert (only_postgres, only_sqlite) == (set(), set())


@pytest.mark.parametrize("store", sorted(STORES))
def test_declared_exceptions_exist_and_say_why(store: str) -> None:
    dialect, statements = STORES[store]
    other = next(s for name, (_, s) in STORES.items() if name != store)
    for name, reason in dialect.own_statements.items():
        assert name in statements, f"{store} declares {name!r}, which its queries.sql lacks"
        assert name not in other, f"{name!r} is in both stores: not an exception"
        assert reason.strip() and "\n" not in reason


@pytest.mark.parametrize("store", sorted(STORES))
def test_followups_only_where_writes_cannot_chain_and_each_follows_a_shared_write(
    store: str,
) -> None:
    dialect, statements = STORES[store]
    found = followups(list(statements))
    if dialect.chained_writes:
        assert found == {}
    for write in found:
        assert all(write in s for _, s in STORES.values()), write


def test_declared_capabilities_match_the_sql() -> None:
    """The capabilities read by Python code agree with the statements each store has."""
    for dialect, statements in STORES.values():
        assert ("consume_signal_journaled" in statements) == dialect.chained_writes
        assert ("record_steps" in statements) == dialect.skip_locked
        assert ("fail_unparsable" in statements) == dialect.checks_whole_rows
        assert ("skip locked" in statements["claim"].lower()) == dialect.skip_locked


def test_statements_are_loaded_without_comments_and_strings_are_kept() -> None:
    """psycopg keeps its parse of statements up to 4,096 characters only: comments and
    blank lines are dropped as a file is loaded, never text inside quotes."""
    sql = "select 'it''s -- no comment', \"a--b\" -- a reader's note\n   from t -- end\n\n  -- x\n"
    assert queries.compact(sql) == "select 'it''s -- no comment', \"a--b\"\n   from t\n"
    assert queries.compact("select 'two\n\n  lines' -- note") == "select 'two\n\n  lines'"
    for _, statements in STORES.values():
        for name, text in statements.items():
            assert not any(line.lstrip().startswith("--") for line in text.splitlines()), name
    assert len(STORES["postgres"][1]["claim_plain"]) <= 4096
