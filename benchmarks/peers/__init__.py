"""``python -m benchmarks.peers``: simple-workflow side by side with its peers on one Postgres.

Procrastinate, DBOS, Absurd and pgqrs each install from PyPI into a virtualenv of their
own (under ``benchmarks/.peers-venvs``) and are driven through their public APIs by a
small script in ``drivers/`` run inside that virtualenv; the psycopg references
("floors") and this working tree are driven the same way. Every measurement gets a new
database on the one server, rounds alternate the order of the systems, and each figure
is the median of the rounds. See docs/performance.md, "Side by side with the peers".
"""
