"""How the client and admin faces run every op: once the store's schema fits.

The first call of a face reads the applied schema version and has
:mod:`~simpleworkflow.backends.schema_verdict` decide (migrate now, or refuse); every
call after it runs its op at once.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from simpleworkflow.backends.base import Backend
from simpleworkflow.backends.ops import Op
from simpleworkflow.backends.schema_verdict import check_joined, ensure, ensure_async

T = TypeVar("T")


class Checked:
    """Runs ops on ``backend`` once its schema fits: the sync client and admin share it."""

    backend: Backend
    _auto_migrate: bool
    _schema_ok: bool

    def _run(self, op: Op[T], *, readonly: bool = False) -> T:
        if not self._schema_ok:
            ensure(self.backend, auto_migrate=self._auto_migrate)
            self._schema_ok = True
        return self.backend.execute(op, readonly=readonly)

    def _run_on(self, connection: Any, op: Op[T]) -> T:
        """``op`` inside the caller's transaction on ``connection``, a driver connection
        :meth:`~simpleworkflow.backends.Backend.joinable` accepted; the schema is checked
        on this object's own connections."""
        if not self._schema_ok:
            version = self.backend.execute(self.backend.schema_version(), readonly=True)
            check_joined(self.backend, version)
            self._schema_ok = True
        return self.backend.execute_on(connection, op)

    def migrate(self) -> list[int]:
        """Create or upgrade the schema; return the migration versions applied now."""
        applied = self.backend.migrate()
        self._schema_ok = True
        return applied


class AsyncChecked:
    """:class:`Checked`, awaited: the async client and admin share it."""

    backend: Backend
    _auto_migrate: bool
    _schema_ok: bool

    async def _run(self, op: Op[T], *, readonly: bool = False) -> T:
        if not self._schema_ok:
            await ensure_async(self.backend, auto_migrate=self._auto_migrate)
            self._schema_ok = True
        return await self.backend.execute_async(op, readonly=readonly)

    async def _run_on(self, connection: Any, op: Op[T]) -> T:
        """:meth:`Checked._run_on`, awaited."""
        if not self._schema_ok:
            version = await self.backend.execute_async(self.backend.schema_version(), readonly=True)
            check_joined(self.backend, version)
            self._schema_ok = True
        return await self.backend.execute_on_async(connection, op)

    async def migrate(self) -> list[int]:
        """Create or upgrade the schema; return the migration versions applied now."""
        applied = await asyncio.to_thread(self.backend.migrate)
        self._schema_ok = True
        return applied
