"""A private Postgres for one benchmark run, and the pgbench that belongs to it.

The server comes from the ``pgserver`` wheel, the one the test suite uses: it installs
from PyPI on any machine, runs as root (Debian's ``initdb`` refuses to), and ships
``pgbench`` of the same version, so the ceiling is measured with a matching client.
It runs with Postgres's defaults (``fsync`` and ``synchronous_commit`` on, as in
production), in a temporary directory removed afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

#: What the benchmark changes from Postgres's defaults, and why.
SETTINGS = {
    # Room for several worker processes with their pools and listeners.
    "max_connections": "200",
}


def _start(data_dir: Path) -> Any:
    import pgserver

    return pgserver.get_server(data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]


class PrivateServer:
    """A throw-away Postgres in ``data_dir`` that a fault benchmark may restart."""

    def __init__(self, data_dir: Path) -> None:
        server = _start(data_dir)
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            for name, value in SETTINGS.items():
                conn.execute(f"alter system set {name} = '{value}'".encode())
        server.cleanup()  # the settings above take effect on restart
        self._server = _start(data_dir)
        self.url = str(self._server.get_uri())

    def restart(self) -> float:
        """Stop the server as a crash would (``pg_ctl stop -m immediate``: every session
        cut, no checkpoint), start it again; return when it accepts connections again
        (``time.time()``)."""
        from pgserver._commands import pg_ctl  # type: ignore[attr-defined]

        server = self._server
        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=server.pgdata, user=server.system_user)
        server.ensure_postgres_running()
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return time.time()
            except psycopg.OperationalError:
                time.sleep(0.01)

    def cleanup(self) -> None:
        self._server.cleanup()


@contextlib.contextmanager
def private_server() -> Iterator[PrivateServer]:
    """A :class:`PrivateServer` in a temporary directory; stopped and deleted after."""
    with tempfile.TemporaryDirectory(prefix="simpleworkflow-bench-") as tmp:
        server = PrivateServer(Path(tmp) / "pgdata")
        try:
            yield server
        finally:
            server.cleanup()


@contextlib.contextmanager
def private_postgres() -> Iterator[str]:
    """Start a throw-away Postgres server and yield its URL; stop and delete it after."""
    with private_server() as server:
        yield server.url


@contextlib.contextmanager
def given_or_private(url: str | None) -> Iterator[str]:
    """``url`` if one was given (``--postgres-url``), else a throw-away server's."""
    if url:
        yield url
    else:
        with private_postgres() as started:
            yield started


def pgbench_path() -> str | None:
    """pgbench from the pgserver wheel, else from PATH or Debian's layout; None if absent."""
    with contextlib.suppress(ImportError):
        import pgserver

        bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
        if bundled.exists():
            return str(bundled)
    found = shutil.which("pgbench")
    if found:
        return found
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))
    return str(debian[-1]) if debian else None
