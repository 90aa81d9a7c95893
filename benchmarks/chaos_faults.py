"""The faults of the chaos benchmark: which may strike, how each is dealt, and its record.

Process faults strike one worker: ``kill`` (SIGKILL; a fresh worker replaces it), ``stop``
(SIGSTOP for a lease and a second, then SIGCONT) and ``term`` (SIGTERM; replaced).
Database faults need Postgres: ``terminate`` ends one worker's connections
(``pg_terminate_backend``, found by their ``application_name``, the worker id);
``restart`` stops the benchmark's own server as a crash would and starts it again;
``silence`` holds every byte between the proxied workers and the server for a lease and
a second, then lets them through (a partition that heals); ``half_open`` cuts the
server's side of the proxied workers' connections and never tells them (a backend gone
without a word). Proxied workers are every second one started; the proxy is
``tests/tcp_proxy.py``, shared with the tests.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import psycopg

from benchmarks.server import PrivateServer

PROCESS = ("kill", "stop", "term")
#: Faults that strike every worker, or every proxied one, at once: one at a time, with a
#: pause of two leases after each, so that each one's effect can be told apart.
WIDE = ("restart", "silence", "half_open")
_ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class Fault:
    """One fault: when it struck (``time.time()``), which workers (names and pids), and
    when it ended: the database could be reached again (restarts, a healed network), a
    frozen worker was thawed."""

    at: float
    kind: str
    workers: dict[str, int]
    back: float | None = None


class Struck(Protocol):
    """What a fault needs of a worker process (``chaos.Worker``)."""

    name: str
    proxied: bool
    frozen: bool
    proc: Any  # subprocess.Popen[str]


def load_proxy() -> ModuleType:
    """``tests/tcp_proxy.py``, loaded from its file: the tests own it, and pytest as
    README.md runs it does not put the benchmarks on the path, so it cannot live here."""
    spec = importlib.util.spec_from_file_location("tcp_proxy", _ROOT / "tests" / "tcp_proxy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Faults:
    """Deals the faults ``kinds`` to the workers ``live()`` returns; ``replace`` starts a
    worker in place of one that exits. Every fault dealt is in :attr:`dealt`."""

    def __init__(
        self,
        kinds: list[str],
        lease: float,
        replace: Callable[[], None],
        server: PrivateServer | None,
        proxy: Any,
        admin_url: str | None,
    ) -> None:
        self.kinds = kinds
        self.lease = lease
        self._replace = replace
        self._server = server
        self._proxy = proxy
        self._admin_url = admin_url
        self.dealt: list[Fault] = []
        self._undo: list[threading.Timer] = []
        self._quiet_until = 0.0
        self._deck: list[str] = []

    def tick(self, workers: Sequence[Struck], rand: random.Random) -> None:
        """Deal one fault, if two workers are live."""
        now = time.monotonic()
        live = [w for w in workers if w.proc.poll() is None and not w.frozen]
        if len(live) < 2:
            return
        kind = self._draw(rand, now, any(w.proxied for w in live))
        if kind is None:
            return
        if kind in WIDE:
            self._quiet_until = now + 2 * self.lease + 2
        getattr(self, f"_{kind}")(live, rand)

    def _draw(self, rand: random.Random, now: float, proxied: bool) -> str | None:
        """The next kind that can strike now from a shuffled deck of every kind (a short
        run meets each kind once before any twice); a wide one waits for its turn."""
        eligible = [
            k
            for k in self.kinds
            if not (k in WIDE and now < self._quiet_until)
            and not (k in ("silence", "half_open") and not proxied)
        ]
        if not eligible:
            return None
        if not self._deck:
            self._deck = rand.sample(self.kinds, len(self.kinds))
        for kind in self._deck:
            if kind in eligible:
                self._deck.remove(kind)
                return kind
        return rand.choice(eligible)

    def finish(self) -> None:
        """Undo every fault still in force."""
        for timer in list(self._undo):
            timer.cancel()
            timer.function()  # once: a timer that already ran has left the list

    def _later(self, undo: Callable[[], None]) -> None:
        """``undo()`` a lease and a second from now, on a timer of its own: never later
        because the benchmark waits for the store (a worker frozen inside a SQLite write
        transaction keeps every writer out until it is thawed)."""
        lock = threading.Lock()

        def once() -> None:
            with lock:
                if timer in self._undo:
                    self._undo.remove(timer)
                    undo()

        timer = threading.Timer(self.lease + 1, once)
        timer.daemon = True
        self._undo.append(timer)
        timer.start()

    def _note(self, kind: str, struck: list[Struck]) -> Fault:
        fault = Fault(time.time(), kind, {w.name: w.proc.pid for w in struck})
        self.dealt.append(fault)
        return fault

    def _kill(self, live: list[Struck], rand: random.Random) -> None:
        self._signal(rand.choice(live), "kill", signal.SIGKILL)

    def _term(self, live: list[Struck], rand: random.Random) -> None:
        self._signal(rand.choice(live), "term", signal.SIGTERM)

    def _signal(self, victim: Struck, kind: str, number: int) -> None:
        self._note(kind, [victim])
        victim.proc.send_signal(number)
        self._replace()

    def _stop(self, live: list[Struck], rand: random.Random) -> None:
        victim = rand.choice(live)
        fault = self._note("stop", [victim])
        victim.proc.send_signal(signal.SIGSTOP)
        victim.frozen = True

        def thaw() -> None:
            victim.proc.send_signal(signal.SIGCONT)
            victim.frozen = False
            fault.back = time.time()

        self._later(thaw)

    def _terminate(self, live: list[Struck], rand: random.Random) -> None:
        victim = rand.choice(live)
        fault = self._note("terminate", [victim])
        assert self._admin_url is not None
        with psycopg.connect(self._admin_url, autocommit=True) as admin:
            admin.execute(
                b"select pg_terminate_backend(pid) from pg_stat_activity"
                b" where application_name = %s",
                (victim.name,),
            )
        fault.back = time.time()

    def _restart(self, live: list[Struck], rand: random.Random) -> None:
        fault = self._note("restart", live)
        assert self._server is not None
        fault.back = self._server.restart()

    def _silence(self, live: list[Struck], rand: random.Random) -> None:
        fault = self._note("silence", [w for w in live if w.proxied])
        self._proxy.hold()

        def heal() -> None:
            self._proxy.flow()
            fault.back = time.time()

        self._later(heal)

    def _half_open(self, live: list[Struck], rand: random.Random) -> None:
        fault = self._note("half_open", [w for w in live if w.proxied])
        self._proxy.half_open()
        fault.back = time.time()  # new connections pass at once
