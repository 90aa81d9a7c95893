"""Dashboard logouts, shared by every process on the store: a logged-out session's nonce
is kept in ``workflow_dashboard_logout`` until the session would have expired anyway, so
that no process serving the dashboard lets its cookie in again, after a restart too."""

from __future__ import annotations

from datetime import datetime

from simpleworkflow.backends.core import StoreCore
from simpleworkflow.backends.ops import Op


class SessionOps(StoreCore):
    def end_session(self, nonce: str, expires_at: datetime, grace: float) -> Op[None]:
        """Record that the session ``nonce`` was logged out (it would have expired at
        ``expires_at``), and delete the records of sessions expired more than ``grace``
        seconds ago by the database's clock (the processes' clocks may disagree that much)."""
        yield self.stmt("forget_ended_sessions", grace=round(float(grace), 3))
        yield self.stmt("end_session", nonce=nonce, expires_at=expires_at)

    def session_ended(self, nonce: str) -> Op[bool]:
        """Whether the session ``nonce`` was logged out: one read by primary key."""
        rows = yield self.stmt("session_ended", nonce=nonce)
        return bool(rows)
