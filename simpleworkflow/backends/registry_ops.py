"""Registry verbs: which runtime runs each workflow type and whether it may, the limits
a type's runs obey (retention, concurrency, a rate limit), and the rate limits
themselves. Workers register their types when they start; operators change the rest."""

from __future__ import annotations

from simpleworkflow import errors
from simpleworkflow.backends.core import StoreCore
from simpleworkflow.backends.ops import ATOMIC, Op
from simpleworkflow.models import RateLimit, RegistryEntry


class RegistryOps(StoreCore):
    def register_types(self, types: list[str], runtime: str) -> Op[None]:
        """Record ``runtime`` for each type that has no registry entry yet."""
        yield self.stmt("register_types", types=types, runtime=runtime)

    def list_registry(self) -> Op[list[RegistryEntry]]:
        rows = yield self.stmt("list_registry")
        return [self.registry_from_row(row) for row in rows]

    def set_registry(self, name: str, runtime: str, description: str | None) -> Op[RegistryEntry]:
        rows = yield self.stmt("set_registry", name=name, runtime=runtime, description=description)
        return self.registry_from_row(rows[0])

    def enable_registry(self, name: str, enabled: bool) -> Op[RegistryEntry | None]:
        rows = yield self.stmt("enable_registry", name=name, enabled=enabled)
        return self.registry_from_row(rows[0]) if rows else None

    def set_registry_retention(
        self, name: str, retention: float | None
    ) -> Op[RegistryEntry | None]:
        """Keep runs of type ``name`` started from now on without a retention of their own
        this many seconds after they finish (``None``: the default; runs fix it when they
        are created); ``None`` back when the type is not registered."""
        rows = yield self.stmt("set_registry_retention", name=name, retention=retention)
        return self.registry_from_row(rows[0]) if rows else None

    def set_registry_concurrency(
        self, name: str, concurrency: int | None, key_concurrency: int | None
    ) -> Op[RegistryEntry | None]:
        """Allow at most ``concurrency`` leased runs of type ``name``, and at most
        ``key_concurrency`` per concurrency key (``None``: no limit), and count its leases
        afresh; ``None`` back when the type is not registered."""
        yield ATOMIC
        yield self.stmt("lock_leases")  # no lease starts or ends until the recount commits
        rows = yield self.stmt(
            "set_registry_concurrency",
            name=name,
            concurrency=concurrency,
            key_concurrency=key_concurrency,
        )
        if not rows:
            return None
        yield self.stmt("clear_concurrency", name=name)
        yield self.stmt("recount_concurrency", name=name)
        return self.registry_from_row(rows[0])

    def lock_registry(self, types: list[str]) -> Op[list[str]]:
        """Lock the registry rows of ``types`` until the transaction ends (Postgres; on
        SQLite writers are serialised); the names of those that exist."""
        rows = yield self.stmt("lock_registry", types=sorted(types))
        return [str(row["workflow_name"]) for row in rows]

    def set_rate_limit(
        self, name: str, max_runs: int, period: float, per_key: bool
    ) -> Op[RateLimit]:
        """Create or change the rate limit ``name``: ``max_runs`` claims per ``period``
        seconds (per concurrency key if ``per_key``)."""
        rows = yield self.stmt(
            "set_rate_limit", name=name, max_runs=max_runs, period=period, per_key=per_key
        )
        return self.rate_limit_from_row(rows[0])

    def list_rate_limits(self) -> Op[list[RateLimit]]:
        rows = yield self.stmt("list_rate_limits")
        return [self.rate_limit_from_row(row) for row in rows]

    def delete_rate_limit(self, name: str) -> Op[bool]:
        """Delete the rate limit ``name`` and its windows; ``False`` if there was none."""
        rows = yield self.stmt("delete_rate_limit", name=name)
        if rows:
            yield from self.then("delete_rate_limit", name=name)
        return bool(rows)

    def set_registry_rate_limit(
        self, type: str, rate_limit: str | None
    ) -> Op[RegistryEntry | None]:
        """Have ``type``'s claims obey the rate limit ``rate_limit`` (``None``: none);
        ``None`` back when the type is not registered. A limit that does not exist is an
        :class:`~simpleworkflow.errors.InvalidArgument`."""
        yield ATOMIC
        if rate_limit is not None and not (yield self.stmt("get_rate_limit", name=rate_limit)):
            raise errors.InvalidArgument(
                f"there is no rate limit named {rate_limit!r}; create it first "
                "(admin.set_rate_limit, or `simpleworkflow limits set`)"
            )
        rows = yield self.stmt("set_registry_rate_limit", name=type, rate_limit=rate_limit)
        return self.registry_from_row(rows[0]) if rows else None
