"""Validation of workflow type names, type prefixes and run ids."""

from __future__ import annotations

import os
import re
import time
import uuid

from simpleworkflow import errors

MAX_TYPE_LENGTH = 200

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


MAX_STEP_NAME = 200
#: What no store can hold in text: NUL (Postgres refuses it) and lone surrogates (not
#: Unicode text at all; neither driver can encode them).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> bool:
    """Whether ``text`` holds a character no store can hold (NUL, a lone surrogate)."""
    return _UNSTORABLE.search(text) is not None


def validate_step_name(name: object) -> str:
    """Return ``name`` if it can name a durable call (a step, sleep, wait, child ...)."""
    if not isinstance(name, str) or not name or len(name) > MAX_STEP_NAME or unstorable(name):
        raise errors.InvalidArgument(
            f"step name must be 1 to {MAX_STEP_NAME} characters, without NUL characters or "
            f"lone surrogates (which no store can hold), not {name!r:.80}"
        )
    return name


def new_run_id() -> str:
    """A new run id: a time-ordered UUID (version 7, RFC 9562) in its text form.

    Ids that grow with time land at the right edge of every index keyed by them (the
    primary key, the audit trail's ``(workflow_id, id)``), so a table of millions of runs
    takes new ones without reading and writing pages all over its indexes. The first 48
    bits are the Unix time in milliseconds, the last 74 random.
    """
    raw = bytearray((time.time_ns() // 1_000_000).to_bytes(6, "big") + os.urandom(10))
    raw[6] = (raw[6] & 0x0F) | 0x70  # version 7
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 9562 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
