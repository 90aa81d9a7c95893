"""The durable engine: one attempt of a run, its handler's ``Context`` and its journal.

See docs/architecture.md ("The durable engine") for which module holds what.
"""
