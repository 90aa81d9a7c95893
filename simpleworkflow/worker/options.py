"""How a worker is configured: one frozen object, checked once when it is made.

:class:`WorkerOptions` holds every setting of an :class:`~simpleworkflow.IntentPoller`.
The poller's keyword arguments (``IntentPoller(type_prefixes=..., lease_duration=...)``)
build one; :class:`WorkerSettings` types those keywords. Adding a setting means a field
here and a key there (a test checks that the two agree), and nothing in the poller's
signature.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

from simpleworkflow import durations, errors, names, retention
from simpleworkflow.worker.supervisor import Service

RUNTIME = "python"
# How often a worker on a store without cross-process notifications (SQLite) checks
# whether another process wrote to it: a shared-memory read, so cheap to do this often.
WATCH_INTERVAL = 0.005
#: Set to ``on`` to have claims and heartbeats wait for the disk, as every other write does.
SYNCHRONOUS_CLAIMS_ENV = "SIMPLEWORKFLOW_SYNCHRONOUS_CLAIMS"
_SWITCH = {"on": True, "true": True, "1": True, "yes": True, "off": False, "false": False}
_SWITCH |= {"0": False, "no": False, "": False}


@dataclass(frozen=True)
class WorkerOptions:
    """Every setting of a worker; durations are seconds once made.

    Durations may also be given as strings (``"30s"``, ``"5ms"``) or timedeltas, and
    ``type_prefixes`` as any iterable: both are normalised here. ``worker_id`` defaults
    to ``host-pid``; ``database_url`` and ``schema`` to the app's. ``services`` run beside
    the worker's own, under its supervisor (see ``supervisor``). ``sweep`` runs the
    retention sweeper (see ``sweeper``; one worker of a fleet sweeps at a time) every
    ``sweep_every``: when not given, ``$SIMPLEWORKFLOW_SWEEP_EVERY``, else 5 minutes
    (``sweep=False`` starts none, whatever else is given); once made, ``sweep_every`` is
    ``None`` exactly when no sweeper runs. ``default_retention`` is
    the sweeper's retention for runs whose start and type chose none. ``scheduler`` runs
    the cron scheduler (see ``scheduler``): any number of workers may, each tick still
    starts one run. ``concurrency`` handlers run at once; ``claim_batch`` is the most runs
    a worker holds at once when its handlers are quick, the ones beyond its free slots
    waiting in it for one (see ``slots``; at most ``concurrency``: no claiming ahead).
    ``synchronous_claims`` makes claims and heartbeats wait for the disk
    on Postgres (``synchronous_commit``), as every other write does; when not given,
    ``$SIMPLEWORKFLOW_SYNCHRONOUS_CLAIMS``, else off: a database crash may then lose the
    last moment's claims, which only makes runs due again (docs/performance.md).
    """

    type_prefixes: tuple[str, ...] = ("%",)
    lease_duration: float = 30.0
    worker_id: str = ""
    concurrency: int = 10
    claim_batch: int = 100
    poll_interval: float = 1.0
    watch_interval: float = WATCH_INTERVAL
    shutdown_grace: float = 30.0
    heartbeat_events: bool = True
    synchronous_claims: bool | None = None
    database_url: str | None = None
    schema: str | None = None
    services: tuple[Service, ...] = ()
    sweep: bool = True
    sweep_every: float | None = None
    default_retention: float | None = None
    scheduler: bool = True

    def __post_init__(self) -> None:
        self._set("type_prefixes", tuple(_checked_prefix(p) for p in self.type_prefixes))
        for name in ("lease_duration", "poll_interval", "watch_interval", "shutdown_grace"):
            self._set(name, durations.to_seconds(getattr(self, name), what=name))
        if self.lease_duration < 1:
            raise errors.InvalidArgument("lease_duration must be at least one second")
        for name in ("concurrency", "claim_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                message = f"{name} must be a positive integer, not {value!r:.40}"
                raise errors.InvalidArgument(message)
        self._set("worker_id", self.worker_id or f"{socket.gethostname()}-{os.getpid()}")
        self._set("synchronous_claims", _synchronous_claims(self.synchronous_claims))
        self._check_sweep()
        self._set("services", tuple(self.services))
        for service in self.services:
            if not isinstance(getattr(service, "name", None), str) or not callable(
                getattr(service, "run", None)
            ):
                raise errors.InvalidArgument(
                    f"a service needs a name and an async run() method, not {service!r:.60}"
                )

    def _check_sweep(self) -> None:
        if not isinstance(self.sweep, bool):
            raise errors.InvalidArgument(f"sweep must be True or False, not {self.sweep!r:.40}")
        if not self.sweep:
            self._set("sweep_every", None)  # no sweeper, whatever else was given
        elif self.sweep_every is not None:
            self._set("sweep_every", durations.to_seconds(self.sweep_every, what="sweep_every"))
            if self.sweep_every < 1:
                raise errors.InvalidArgument("sweep_every must be at least one second")
        else:
            self._set("sweep_every", retention.sweep_every_from_env())
        if self.default_retention is not None:
            if self.sweep_every is None:
                raise errors.InvalidArgument(
                    "default_retention (--default-retention) is the sweeper's, and this "
                    "worker runs none (sweep=False, --no-sweep, or "
                    f"${retention.SWEEP_ENV}=off)"
                )
            keep = retention.check(self.default_retention, what="default_retention")
            self._set("default_retention", keep)
        if self.sweep_every is not None:
            self.policy()  # a bad environment fails the worker's start, not its sweeper

    def policy(self) -> retention.Policy:
        """The retention default and ceiling this worker's sweeper applies."""
        return retention.Policy.from_env(self.default_retention)

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)  # frozen: only while it is being made


class WorkerSettings(TypedDict, total=False):
    """The keyword arguments of ``IntentPoller``: the fields of :class:`WorkerOptions`,
    as a caller may give them."""

    type_prefixes: Iterable[str]
    lease_duration: durations.Duration
    worker_id: str | None
    concurrency: int
    claim_batch: int
    poll_interval: durations.Duration
    watch_interval: durations.Duration
    shutdown_grace: durations.Duration
    heartbeat_events: bool
    synchronous_claims: bool | None
    database_url: str | None
    schema: str | None
    services: Iterable[Service]
    sweep: bool
    sweep_every: durations.Duration | None
    default_retention: durations.Duration | None
    scheduler: bool


def _checked_prefix(prefix: str) -> str:
    names.prefix_stem(prefix)
    return prefix


def _synchronous_claims(given: bool | None) -> bool:
    if given is not None:
        if not isinstance(given, bool):
            raise errors.InvalidArgument(
                f"synchronous_claims must be True or False, not {given!r:.40}"
            )
        return given
    text = os.environ.get(SYNCHRONOUS_CLAIMS_ENV, "").strip().lower()
    if text not in _SWITCH:
        raise errors.ConfigurationError(
            f"${SYNCHRONOUS_CLAIMS_ENV} must be on or off, not {text!r:.40}"
        )
    return _SWITCH[text]
