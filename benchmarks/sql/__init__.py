"""The SQL the benchmark itself runs, one named-query file per store.

The engine's statements stay in ``simpleworkflow/backends``; these only load backlogs and
read timings, so that a measurement never depends on the code it measures.
"""
