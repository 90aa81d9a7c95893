"""How the library's Postgres connections guard against a database or network that fails.

Without these a connection to a host that went silent waits for the operating system's
TCP timeouts (minutes to hours), a half-open connection is never noticed, and a worker
is wedged until someone restarts it. Each setting is a libpq keyword, so the database
URL overrides any of them (``?connect_timeout=2``, ``?options=-c%20statement_timeout%3D0``):
a default applies only where the URL says nothing.
"""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: libpq keywords: give up connecting after 5 s; probe an idle connection after 10 s of
#: silence, every 5 s, 3 times; drop a connection whose sent data stays unacknowledged
#: for 30 s (a partition while a statement is on its way).
CLIENT_DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}
#: Server settings: no statement of the library runs for a minute (a claim or a journal
#: write takes milliseconds), and a session that dies inside a transaction does not hold
#: its row locks for more than a minute.
SERVER_DEFAULTS = {
    "statement_timeout": "60s",
    "idle_in_transaction_session_timeout": "60s",
}
#: Seconds an async store call (all a worker makes) may take from start to end, waiting
#: for a connection included: past it the call fails with ``StoreUnavailable``. Longer
#: than the statement timeout, so that the server's own limit speaks first.
CALL_TIMEOUT = 65.0
#: What a connection is called in ``pg_stat_activity`` unless the caller or URL says.
APPLICATION_NAME = "simpleworkflow"


def conninfo(url: str, application_name: str | None = None, *, server: bool = True) -> str:
    """``url`` with the defaults it does not set; ``server=False`` leaves the statement
    timeouts out (a migration may wait for another's lock and take long)."""
    params = conninfo_to_dict(url)
    for key, value in CLIENT_DEFAULTS.items():
        params.setdefault(key, value)
    params.setdefault("application_name", application_name or APPLICATION_NAME)
    if server:
        options = str(params.get("options") or "")
        extra = [f"-c {k}={v}" for k, v in SERVER_DEFAULTS.items() if k not in options]
        params["options"] = " ".join([options, *extra]).strip()
    return make_conninfo("", **params)
