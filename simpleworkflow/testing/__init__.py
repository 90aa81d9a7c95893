"""Testing workflows: the real engine on a fresh store, with a clock the test controls.

``Environment`` is the harness (see docs/testing.md); the pytest plugin
(``simpleworkflow.testing.plugin``, registered as an entry point) gives it as the
``workflow_env`` fixture, for the app a test's ``workflow_app`` fixture returns.
"""

from __future__ import annotations

from simpleworkflow.testing.environment import Environment
from simpleworkflow.testing.replay import History, assert_replays, record_history

__all__ = ["Environment", "History", "assert_replays", "record_history"]
