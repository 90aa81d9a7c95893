"""Validation of workflow type names, type prefixes, run ids, topics, topic patterns and
schedule names, and of the integer options every way of starting a run shares (priority,
max attempts)."""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator

from simpleworkflow import errors

MAX_TYPE_LENGTH = 200
#: A run's priority is a Postgres ``integer``: from -MAX_PRIORITY to MAX_PRIORITY.
MAX_PRIORITY = 2**31 - 1
#: The most attempts a run may be given.
MAX_ATTEMPTS = 10_000

_SEGMENT = r"[a-z][a-z0-9_]*"
_TYPE_RE = re.compile(rf"^{_SEGMENT}(?:\.{_SEGMENT})+\.v[0-9]+$")
_PREFIX_RE = re.compile(rf"^(?:{_SEGMENT}\.)*(?:{_SEGMENT})?%?$")

# Names already found valid; bounded, since names may come from outside.
_KNOWN_VALID: set[str] = set()
_KNOWN_VALID_LIMIT = 10_000


def validate_type(name: object) -> str:
    """Return ``name`` if it is a valid versioned type, else raise :class:`InvalidTypeName`.

    Valid names are dotted lowercase segments ending in a version, with at least two
    segments before it: ``content.thumbnail.v1``, ``billing.invoice.send.v2``.
    """
    if type(name) is str and name in _KNOWN_VALID:  # start_many checks one name many times
        return name
    if not isinstance(name, str):
        raise errors.InvalidTypeName(f"workflow type must be a string, got {type(name).__name__}")
    if len(name) > MAX_TYPE_LENGTH:
        raise errors.InvalidTypeName(
            f"workflow type is {len(name)} characters long; the limit is {MAX_TYPE_LENGTH}"
        )
    if not _TYPE_RE.fullmatch(name):
        raise errors.InvalidTypeName(
            f"invalid workflow type {name!r}: {broken_rule(name)}; write dotted lowercase "
            "segments ending in a version, like 'content.thumbnail.v1' or "
            "'billing.invoice.send.v2'"
        )
    if len(_KNOWN_VALID) < _KNOWN_VALID_LIMIT:
        _KNOWN_VALID.add(name)
    return name


_VERSION_RE = re.compile(r"^v[0-9]+$")
_SEGMENT_RE = re.compile(rf"^{_SEGMENT}$")


def broken_rule(name: str) -> str:
    """The first rule of type names that ``name`` breaks, said plainly."""
    if not name:
        return "it is empty"
    if name != name.lower():
        return "it has upper-case letters (type names are all lower case)"
    segments = name.split(".")
    if "" in segments:
        return "it has an empty segment (a leading, trailing or doubled '.')"
    if not _VERSION_RE.fullmatch(segments[-1]):
        return f"it must end in a version segment such as '.v1', not {segments[-1]!r}"
    if len(segments) < 3:
        return "it needs at least two segments before the version, like 'content.thumbnail'"
    for segment in segments[:-1]:
        if not _SEGMENT_RE.fullmatch(segment):
            return (
                f"segment {segment!r} must start with a letter and hold only letters, "
                "digits and '_'"
            )
    return "it is not <domain>.<subdomain>.<action>.vN"


def prefix_stem(prefix: str) -> str:
    """The literal start of the types a prefix selects: ``'billing.%'`` gives ``'billing.'``."""
    if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
        raise errors.InvalidArgument(
            f"invalid type prefix {prefix!r}: use a dotted lowercase prefix such as "
            "'billing.%' (or '%' for every type)"
        )
    stem = prefix[:-1] if prefix.endswith("%") else prefix
    if stem and not stem.endswith(".") and not prefix.endswith("%"):
        stem += "."
    return stem


def like_pattern(prefix: str) -> str:
    """Turn a type prefix (``'billing.%'``, ``'billing.'`` or ``'billing'``) into a LIKE pattern.

    A complete type name (``'billing.invoice.v1'``) selects exactly that type.

    ``_`` is a LIKE wildcard but a legal character in type names, so it is escaped
    (with ``\\``, the default LIKE escape in Postgres and the one the SQLite queries name).
    """
    stem = prefix_stem(prefix)
    if _TYPE_RE.fullmatch(prefix):  # a whole type name stands for itself, not for a segment
        return prefix.replace("_", "\\_")
    return stem.replace("_", "\\_") + "%"


def prefix_matches(prefix: str, type_name: str) -> bool:
    """Whether ``type_name`` is selected by ``prefix``, as the LIKE pattern would decide."""
    stem = prefix_stem(prefix)
    if _TYPE_RE.fullmatch(prefix):
        return type_name == prefix
    return type_name.startswith(stem)


def normalize_run_id(run_id: object) -> str:
    """Return the canonical string form of a run id, or raise :class:`RunNotFound`."""
    if isinstance(run_id, uuid.UUID):
        return str(run_id)
    if isinstance(run_id, str):
        try:
            return str(uuid.UUID(run_id))
        except ValueError:
            pass
    raise errors.RunNotFound(str(run_id), "not a run id: run ids are UUIDs")


_EVENT_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")


def validate_event(event: object) -> str:
    """Return ``event`` if it is a usable signal name (letters, digits, ``_.:-``)."""
    if not isinstance(event, str) or not _EVENT_RE.fullmatch(event):
        raise errors.InvalidArgument(
            f"invalid event name {event!r}: use 1 to 200 letters, digits or '_.:-', "
            "like 'verify' or 'payment.confirmed'"
        )
    return event


MAX_TOPIC_LENGTH = 200
#: Short enough that a published run's idempotency key (``topic:<topic>:<type>:<event id>``)
#: stays within the clients' 512 characters.
MAX_EVENT_ID_LENGTH = 100

_TOPIC_SEGMENT = r"[a-z0-9][a-z0-9_\-]*"
_TOPIC_RE = re.compile(rf"^{_TOPIC_SEGMENT}(?:\.{_TOPIC_SEGMENT})*$")
_TOPIC_SEGMENT_RE = re.compile(rf"^{_TOPIC_SEGMENT}$")
_TOPIC_RULES = "write dotted lowercase segments (letters, digits, '_', '-'), like 'orders.created'"


def validate_topic(topic: object) -> str:
    """Return ``topic`` if events may be published on it, else raise :class:`InvalidArgument`.

    A topic is dotted lowercase segments (``orders.created``, ``billing.invoice-paid``):
    the wildcards of patterns (``*``, ``#``) and the LIKE wildcards (``%``) never appear in
    one, so that a topic matches a pattern only as the pattern's rules say.
    """
    if not isinstance(topic, str):
        raise errors.InvalidArgument(f"a topic must be a string, not {type(topic).__name__}")
    _check_length("topic", topic)
    if not _TOPIC_RE.fullmatch(topic):
        raise errors.InvalidArgument(
            f"invalid topic {topic!r}: {_broken_topic_rule(topic, pattern=False)}; {_TOPIC_RULES}"
        )
    return topic


def validate_schedule_name(name: object) -> str:
    """Return ``name`` if it can name a cron schedule, else raise :class:`InvalidArgument`.

    The characters of topics (dotted lowercase segments of letters, digits, ``_`` and
    ``-``, at most 200 characters): never a ``:``, which separates the name from the
    tick in the idempotency key of a scheduled run. The type it starts is a fine name.
    """
    if not isinstance(name, str) or len(name) > MAX_TOPIC_LENGTH or not _TOPIC_RE.fullmatch(name):
        raise errors.InvalidArgument(
            f"invalid schedule name {name!r:.80}: use 1 to {MAX_TOPIC_LENGTH} characters of "
            "dotted lowercase segments (letters, digits, '_', '-'), like "
            "'billing.invoice.nightly' or the type it starts, 'billing.invoice.nightly.v1'"
        )
    return name


def validate_topic_pattern(pattern: object) -> str:
    """Return ``pattern`` if a workflow type may subscribe to it, else raise
    :class:`InvalidArgument`.

    A pattern is a topic whose segments may also be wildcards: ``*`` stands for exactly
    one segment (``orders.*`` matches ``orders.created``, not ``orders.eu.created``), and
    ``#``, as the last segment only, for one or more (``orders.#`` matches both, not
    ``orders``; ``#`` alone matches every topic). A pattern with ``#`` has no ``*``: with
    both, a match could not be decided by the ``LIKE`` every store (and every producer's
    plain SQL) uses.
    """
    if not isinstance(pattern, str):
        raise errors.InvalidArgument(
            f"a topic pattern must be a string, not {type(pattern).__name__}"
        )
    _check_length("topic pattern", pattern)
    problem = _broken_topic_rule(pattern, pattern=True)
    if problem:
        raise errors.InvalidArgument(
            f"invalid topic pattern {pattern!r}: {problem}; {_TOPIC_RULES}, with '*' for "
            "any one segment or a last '#' for one or more: 'orders.*', 'orders.#'"
        )
    return pattern


def _check_length(what: str, text: str) -> None:
    if len(text) > MAX_TOPIC_LENGTH:
        raise errors.InvalidArgument(
            f"a {what} is at most {MAX_TOPIC_LENGTH} characters, not {len(text)}"
        )


def _broken_topic_rule(text: str, *, pattern: bool) -> str:
    """The first rule of topics (or patterns) that ``text`` breaks; empty if none."""
    if not text:
        return "it is empty"
    if text != text.lower():
        return "it has upper-case letters (topics are all lower case)"
    segments = text.split(".")
    if "" in segments:
        return "it has an empty segment (a leading, trailing or doubled '.')"
    if pattern and "#" in segments:
        if segments.index("#") < len(segments) - 1:
            return "'#' may only be the last segment"
        if "*" in segments:
            return "'#' cannot be combined with '*' in one pattern"
    for segment in segments:
        problem = _broken_segment_rule(segment, pattern=pattern)
        if problem:
            return problem
    return ""


def _broken_segment_rule(segment: str, *, pattern: bool) -> str:
    if _TOPIC_SEGMENT_RE.fullmatch(segment) or (pattern and segment in ("*", "#")):
        return ""
    if "*" in segment or "#" in segment:
        if pattern:
            return f"a wildcard must be a whole segment, not part of {segment!r}"
        return f"wildcards belong in subscription patterns, not in topics ({segment!r})"
    return (
        f"segment {segment!r} must start with a letter or digit and hold only letters, "
        "digits, '_' and '-'"
    )


#: The longest key a run or a call may name (idempotency, concurrency, rate-limit keys).
MAX_KEY_LENGTH = 512


def validate_key(key: object, what: str) -> str | None:
    """``key`` if it is ``None`` or a storable key: a non-empty string of at most
    :data:`MAX_KEY_LENGTH` characters that every store keeps as it is."""
    if key is None:
        return None
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH or unstorable(key):
        raise errors.InvalidArgument(
            f"{what} must be a non-empty string of at most {MAX_KEY_LENGTH} "
            f"characters without NUL characters or lone surrogates, not {key!r:.80}"
        )
    return key


def validate_event_id(event_id: object) -> str:
    """Return ``event_id`` if it can identify a published event (1 to 100 characters, any
    text a store can hold: ``evt_123``, a UUID, ``orders-3:18442``)."""
    if (
        not isinstance(event_id, str)
        or not event_id
        or len(event_id) > MAX_EVENT_ID_LENGTH
        or unstorable(event_id)
    ):
        raise errors.InvalidArgument(
            f"an event id must be 1 to {MAX_EVENT_ID_LENGTH} characters without NUL "
            f"characters or lone surrogates, not {event_id!r:.80}"
        )
    return event_id


MAX_STEP_NAME = 200
#: What no store can hold in text: NUL (Postgres refuses it) and lone surrogates (not
#: Unicode text at all; neither driver can encode them).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> bool:
    """Whether ``text`` holds a character no store can hold (NUL, a lone surrogate)."""
    return _UNSTORABLE.search(text) is not None


def unstorable_part(text: str) -> str | None:
    """What ``text`` holds that no store can hold, and where (the first such character),
    e.g. ``"a lone surrogate (U+DC80) at position 3"``; ``None`` if nothing."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    what = "a NUL character" if char == "\x00" else f"a lone surrogate (U+{ord(char):04X})"
    return f"{what} at position {found.start()}"


def validate_step_name(name: object) -> str:
    """Return ``name`` if it can name a durable call (a step, sleep, wait, child ...)."""
    if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME:
        size = f" ({len(name)} characters)" if isinstance(name, str) else ""
        raise errors.InvalidArgument(
            f"step name must be text of 1 to {MAX_STEP_NAME} characters, not {name!r:.80}{size}"
        )
    if (part := unstorable_part(name)) is not None:
        raise errors.InvalidArgument(
            f"step name {name!r:.80} has {part}, which no store can hold; name steps "
            "with plain text"
        )
    return name


def new_run_id() -> str:
    """A new run id: a time-ordered UUID (version 7, RFC 9562) in its text form.

    Ids that grow with time land at the right edge of every index keyed by them (the
    primary key, the audit trail's ``(workflow_id, id)``), so a table of millions of runs
    takes new ones without reading and writing pages all over its indexes. The first 48
    bits are the Unix time in milliseconds, the last 74 random.
    """
    return _run_id(os.urandom(10))


def new_run_ids() -> Iterator[str]:
    """New run ids as :func:`new_run_id` makes them, for a batch: the random bits come
    from one read of the system's generator per ``_IDS_PER_READ`` ids instead of one per
    id. Nothing is kept between calls (a forked process shares no bits with its parent).
    """
    while True:
        # The text is cut from the hex of the bits (and of the milliseconds, read once
        # per read of bits) with the version and variant put in: no bytes per id.
        random = os.urandom(10 * _IDS_PER_READ).hex()
        ms = f"{time.time_ns() // 1_000_000:012x}"
        head = f"{ms[:8]}-{ms[8:]}-7"
        for start in range(0, len(random), 20):
            bits = random[start : start + 20]
            yield f"{head}{bits[1:4]}-{_VARIANT[bits[4]]}{bits[5:8]}-{bits[8:]}"


#: Ids whose random bits :func:`new_run_ids` reads at once.
_IDS_PER_READ = 64
#: A hex digit with its two high bits made ``10``, the RFC 9562 variant.
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def _run_id(random: bytes) -> str:
    raw = bytearray((time.time_ns() // 1_000_000).to_bytes(6, "big") + random)
    raw[6] = (raw[6] & 0x0F) | 0x70  # version 7
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def check_int(what: str, value: object, low: int, high: int) -> int:
    """``value``, an ``int`` (not a ``bool``) from ``low`` to ``high``; else a clear error."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise errors.InvalidArgument(
            f"{what} must be an integer from {low} to {high}, not {value!r}"
        )
    return value


def check_priority(priority: object) -> int:
    return check_int("priority", priority, -MAX_PRIORITY, MAX_PRIORITY)


def check_max_attempts(max_attempts: object) -> int | None:
    """``None`` (the default, 3) or a number of attempts."""
    return (
        None if max_attempts is None else check_int("max_attempts", max_attempts, 1, MAX_ATTEMPTS)
    )


MAX_VALUE_KEY_LENGTH = 100
_VALUE_KEY_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")


def validate_value_key(key: object) -> str:
    """Return ``key`` if it can name a value a run publishes (``ctx.set_value``): 1 to 100
    letters, digits or ``_.:-``, so that it reads the same in a URL, a shell and SQL."""
    if not isinstance(key, str) or not _VALUE_KEY_RE.fullmatch(key):
        raise errors.InvalidArgument(
            f"invalid value key {key!r:.80}: use 1 to {MAX_VALUE_KEY_LENGTH} letters, "
            "digits or '_.:-', like 'status' or 'payment.state'"
        )
    return key


#: A run's stream key: what a URL path and an SSE client carry as they are.
_STREAM_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,100}")


def check_stream_key(key: object) -> str:
    """Return ``key`` if it can name one of a run's streams."""
    if not isinstance(key, str) or not _STREAM_KEY.fullmatch(key):
        raise errors.InvalidArgument(
            f"stream key must be 1 to 100 letters, digits, '_', '.', ':' or '-', not {key!r:.80}"
        )
    return key


def check_stream_offset(after: object) -> int:
    """Return ``after`` (an item's offset; ``-1`` or ``None``: before the first)."""
    if after is None:
        return -1
    if isinstance(after, bool) or not isinstance(after, int) or after < -1:
        raise errors.InvalidArgument(
            f"after must be an item's offset (an integer from -1), not {after!r:.80}"
        )
    return after
