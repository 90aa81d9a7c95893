"""In-process wake-ups for stores that have no notifications of their own (SQLite).

When a producer and a worker share a process and a SQLite file, the producer's commit
wakes the worker at once instead of at its next poll. The registry is per process by
nature: other processes still find the work by polling.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Listener = Callable[[str, str], None]

_lock = threading.Lock()
_listeners: dict[str, set[Listener]] = {}


def subscribe(key: str, listener: Listener) -> None:
    with _lock:
        _listeners.setdefault(key, set()).add(listener)


def unsubscribe(key: str, listener: Listener) -> None:
    with _lock:
        _listeners.get(key, set()).discard(listener)


def publish(key: str, kind: str, value: str) -> None:
    """Tell this process's listeners on ``key`` about ``kind`` (``wake``/``cancel``)."""
    with _lock:
        listeners = list(_listeners.get(key, ()))
    for listener in listeners:
        listener(kind, value)
