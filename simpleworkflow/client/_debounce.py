"""The ``debounce`` start option, checked: repeated starts with one key collapse into one
run, due once the calls stop for a window (see docs/flow-control.md).

Its SQL (``debounce_run``) inserts the run or updates the pending one in place, so the
check here is all the client does; the store decides which call was first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, NotRequired, TypedDict

from simpleworkflow import durations, errors, names


class Debounce(TypedDict):
    """``debounce={"key": ..., "window": "30s", "max_wait": "5m"}``; ``("key", "30s")``
    is the same without a ``max_wait``."""

    #: Starts of one type with the same key collapse into one run.
    key: str
    #: The run is due this long after the last call (``30``, ``"30s"``, a ``timedelta``).
    window: durations.Duration
    #: ...but no later than this long after the first call; at least ``window``.
    max_wait: NotRequired[durations.Duration | None]


#: What the ``debounce`` option takes.
DebounceSpec = tuple[str, durations.Duration] | Debounce


class Checked(NamedTuple):
    """A valid ``debounce``, its durations in seconds (``max_wait`` ``None``: no cap)."""

    key: str
    window: float
    max_wait: float | None

    def params(self) -> dict[str, Any]:
        """The fields of ``NewRun`` it fills."""
        return {
            "debounce_key": self.key,
            "debounce_window": self.window,
            "debounce_max_wait": self.max_wait,
        }


def check(value: object, options: Mapping[str, Any], *, max_key: int) -> Checked | None:
    """The ``debounce`` option in seconds, or ``None`` when it is not given; refuses the
    options that cannot go with it. The key's bound is an idempotency key's; the
    durations', every duration's (``durations.MAX_SECONDS``)."""
    if value is None:
        return None
    key, window, max_wait = _parts(value)
    for clash, why in _CLASHES.items():
        if options.get(clash) is not None:
            raise errors.InvalidArgument(f"debounce and {clash} cannot go together: {why}")
    if not isinstance(key, str) or not key or len(key) > max_key or names.unstorable(key):
        raise errors.InvalidArgument(
            f"a debounce key must be a non-empty string of at most {max_key} "
            f"characters without NUL characters or lone surrogates, not {key!r:.80}"
        )
    seconds = _positive(window, "debounce window")
    if max_wait is None:
        return Checked(key, seconds, None)
    cap = _positive(max_wait, "debounce max_wait")
    if cap < seconds:
        raise errors.InvalidArgument(
            f"debounce max_wait ({cap:g}s) must be at least the window ({seconds:g}s)"
        )
    return Checked(key, seconds, cap)


_CLASHES = {
    "idempotency_key": "a debounced run is found by its debounce key; use one or the other",
    "run_at": "a debounced run is due one window after the last call",
    "delay": "a debounced run is due one window after the last call",
}


def _parts(value: object) -> tuple[object, object, object]:
    if isinstance(value, tuple) and len(value) == 2:
        return value[0], value[1], None
    if isinstance(value, Mapping):
        unknown = sorted(str(name) for name in value.keys() - {"key", "window", "max_wait"})
        if unknown:
            raise errors.InvalidArgument(
                f"unknown debounce field {unknown[0]!r}; the fields are key, window, max_wait"
            )
        if "key" in value and "window" in value:
            return value["key"], value["window"], value.get("max_wait")
    raise errors.InvalidArgument(
        'debounce takes ("key", window) or {"key": ..., "window": ..., "max_wait": ...}, '
        f"not {value!r:.80}"
    )


def _positive(value: object, what: str) -> float:
    seconds = durations.to_seconds(value, what=what)  # type: ignore[arg-type]
    if seconds <= 0:
        raise errors.InvalidArgument(
            f"{what} must be more than 0 and {durations.DURATION_RANGE}, not {value!r:.60}"
        )
    return seconds
