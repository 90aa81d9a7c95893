"""The benchmark suite: throughput and latency of simple-workflow against pgbench's ceiling.

Run it from a checkout with ``python -m benchmarks`` (see ``docs/performance.md``). One
module per concern: ``server`` starts a private Postgres, ``pgbench`` measures what the
machine's Postgres can commit at all, ``stores`` prepares fresh stores and reads the
database clock, ``workers`` runs worker processes, ``cases``, ``latency`` and ``backlog``
measure, ``suite`` runs them all with repeats, and ``report`` prints, saves and plots.
"""
