"""The durable engine: one attempt of a run, its handler's ``Context`` and its journal.

From the top down: ``execution`` calls the handler once and makes the outcome;
``attempt`` is the attempt as the worker holds it; ``context`` is the handler's face,
which hands each durable call to its module (``steps`` with ``transactional``,
``sleeps``, ``signals``, ``children``, ``throttle``, ``races``); ``journal`` is
``Durable``, every journal look-up and write of the attempt, over ``replay``,
``suspension``, ``holding`` and ``kinds``. docs/architecture.md says more.
"""
