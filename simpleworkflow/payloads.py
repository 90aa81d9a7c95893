"""Turning payloads and results into JSON that every backend stores the same way.

Postgres ``jsonb`` refuses NUL characters and NaN; SQLite would keep them. To keep the
two stores identical we refuse them everywhere, with a message that names where they are.
A codec (``simpleworkflow.codec``) writes more types as JSON; the same checks follow.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import math
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from simpleworkflow import errors

DEFAULT_MAX_BYTES = 1024 * 1024
#: Arrays and objects within each other, at most. Every reader of a stored payload
#: (a worker's claim, the API's listing, which wraps each run in two more levels, the
#: dashboard) parses and writes it again on a call stack of its own; Python's JSON
#: modules recurse once per level, within the interpreter's limit of 1,000 frames. A
#: payload the client could just write was past that limit for some of them: stored, and
#: then the listing answered 500 while it existed. Half the limit leaves them all room.
MAX_DEPTH = 512


class NotJSON(Exception):
    """Raised by the encoder's hook (or a codec's) for a value it cannot convert."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _to_json(value: Any) -> Any:
    """The encoder's hook: dataclasses and pydantic models become plain JSON."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        return model_dump(mode="json")
    raise NotJSON(value)


# One encoder for every call: json.dumps with options builds a new one each time, which
# costs more than encoding a small payload.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), default=_to_json)
# The C function under _ENCODER.encode, made once with its settings and no markers (the
# check for reference cycles): calling it directly skips the two Python frames that
# encode() runs per call, about 0.7 µs, most of a small payload's cost. A value it fails
# on (a cycle among them) is encoded again by _ENCODER, which raises the error to report.
_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)  # None without the C module
_C_ENCODE = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(
        None, _to_json, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, False
    )
)


_JSON_TYPES = (dict, list, tuple, str, int, float, bool, type(None))


class Encoding(Protocol):
    """What :func:`encode` needs of a codec (``simpleworkflow.codec.Codec``)."""

    encoder: json.JSONEncoder

    def to_json(self, value: Any) -> Any: ...


Convert = Callable[[Any], Any] | None


def _plain(codec: Encoding | None) -> Convert:
    """How a value reads as JSON through ``codec``, for naming where a bad one is."""
    if codec is None:
        return None

    def convert(value: Any) -> Any:
        if isinstance(value, _JSON_TYPES):
            return value
        try:
            return codec.to_json(value)
        except (NotJSON, ValueError):
            return value

    return convert


def _not_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, decimal.Decimal) and not value.is_finite()  # a codec's


def _not_json(root: Any, value: Any, what: str, convert: Convert) -> errors.InvalidPayload:
    """Name the value JSON cannot hold by its path in the payload, and say what to do."""
    where = _find(root, what, _is_foreign, convert) or what
    return errors.InvalidPayload(
        f"{where}: a value of type {type(value).__name__} is not JSON; {_hint(value)}"
    )


def _is_foreign(value: Any) -> bool:
    """A value the encoder cannot write (dataclasses and models it converts)."""
    if isinstance(value, _JSON_TYPES):
        return False
    if isinstance(value, type):
        return True
    return not (dataclasses.is_dataclass(value) or callable(getattr(value, "model_dump", None)))


def _hint(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return "encode bytes as text first (base64, or .decode() for text)"
    if isinstance(value, set | frozenset):
        return "use a list instead of a set"
    if isinstance(value, datetime.date | datetime.time):
        return "send it as text, e.g. value.isoformat()"
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return "send it as text, e.g. str(value)"
    return "convert it to dicts, lists, strings, numbers, booleans or None"


def encode(
    value: Any,
    *,
    what: str = "payload",
    max_bytes: int = DEFAULT_MAX_BYTES,
    codec: Encoding | None = None,
) -> str:
    """Return ``value`` as compact JSON text, or raise a clear :class:`InvalidPayload`.
    ``codec`` writes the types it knows (see ``simpleworkflow.codec``); the checks after
    are the same."""
    try:
        text = _plain_json(value) if codec is None else codec.encoder.encode(value)
    except NotJSON as exc:
        raise _not_json(value, exc.value, what, _plain(codec)) from None
    except ValueError as exc:
        if "ircular" in str(exc):
            raise errors.InvalidPayload(f"{what} contains a reference cycle") from None
        where = _find(value, what, _not_finite, _plain(codec))
        if not where:  # e.g. an int too long to print
            raise errors.InvalidPayload(f"{what} is not JSON: {exc}") from None
        raise errors.InvalidPayload(
            f"{where} is NaN or infinite, which JSON cannot hold; use null or a string"
        ) from None
    except TypeError as exc:  # a dict key of another type than str, int, float, bool, None
        where = _find(value, what, lambda v: False)
        raise errors.InvalidPayload(f"{where or what} is not JSON: {exc}") from None
    except RecursionError:
        raise errors.InvalidPayload(f"{what} is nested too deeply (or contains a cycle)") from None
    _check_text(value, text, what, codec)
    _check_depth(text, what)
    if "e+" in text:
        text = _FLOAT_WITH_EXPONENT.sub(_positional, text)
    size = len(text) if text.isascii() else len(text.encode())
    if size > max_bytes:
        raise errors.PayloadTooLarge(
            f"{what} is {size} bytes of JSON; the limit is {max_bytes} bytes. Store large "
            "data elsewhere and pass a reference, or raise max_payload_bytes"
        )
    return text


def _plain_json(value: Any) -> str:
    """``_ENCODER.encode(value)``, through the C encoder when it can."""
    if _C_ENCODE is not None:
        try:
            return "".join(_C_ENCODE(value, 0))
        except Exception:  # _ENCODER raises it again, as it should be reported
            pass
    return _ENCODER.encode(value)


# Postgres jsonb keeps a number as a numeric, which forgets how it was written: the float
# 1e+16 comes back as the int 10000000000000000 and 1e+300 as the int 10**300, another
# value. Written out with its digits and a ".0", a float keeps its type and value in both
# stores. Python writes a float with a positive exponent only from 1e16 up; strings are
# matched whole so that their text is left alone.
_FLOAT_WITH_EXPONENT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?[0-9]+(?:\.[0-9]+)?e\+[0-9]+)')


def _positional(match: re.Match[str]) -> str:
    if match.group(1) is None:
        return match.group(0)
    digits = format(decimal.Decimal(match.group(1)), "f")
    return digits if "." in digits else f"{digits}.0"


_SURROGATE = re.compile("[\ud800-\udfff]")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _check_depth(text: str, what: str) -> None:
    """Refuse JSON nested deeper than :data:`MAX_DEPTH`. Counting brackets costs two
    scans in C; only text with that many arrays and objects is walked (strings left out)."""
    if len(text) <= MAX_DEPTH or text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > MAX_DEPTH:
            raise errors.InvalidPayload(
                f"{what} is nested more than {MAX_DEPTH} levels deep (arrays and objects "
                "within each other), more than every reader of it can parse; flatten it"
            )


def _check_text(value: Any, text: str, what: str, codec: Encoding | None = None) -> None:
    """Refuse strings Postgres cannot store: NUL characters and unpaired surrogates.

    The JSON text is searched first (cheap); only when an escape that might come from a bad
    string appears is the value walked, to be sure and to name where it is.
    """
    if "\\u0000" in text:
        where = _find(value, what, lambda v: isinstance(v, str) and "\x00" in v, _plain(codec))
        if where:
            raise errors.InvalidPayload(
                f"{where} contains a NUL character (\\u0000), which Postgres cannot store; "
                "remove it, or encode binary data as base64"
            )
    # ensure_ascii writes characters beyond the BMP as surrogate pairs too, so the walk
    # also runs for emoji, and finds nothing there.
    if "\\ud" in text:
        bad = _SURROGATE.search
        where = _find(value, what, lambda v: isinstance(v, str) and bool(bad(v)), _plain(codec))
        if where:
            raise errors.InvalidPayload(
                f"{where} contains a lone surrogate code point (U+D800 to U+DFFF), which is "
                "not valid Unicode text; decode the text without 'surrogateescape' or "
                "'surrogatepass', or encode binary data as base64"
            )


def storable(text: str) -> str:
    """``text`` as every store accepts it: NUL and lone surrogates written as escapes.

    For what the engine itself records about an attempt (error messages, tracebacks):
    handlers' exceptions may hold either (binary data, undecodable file names), Postgres
    refuses both, and a write that fails would leave the run leased. Payloads and results
    are refused instead (see :func:`encode`), since changing them would change the data.
    """
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def scrub(value: Any) -> Any:
    """``value`` with its strings made :func:`storable` and whatever JSON cannot hold
    (NaN, datetimes, objects) written as text: the engine's records made writable."""
    if isinstance(value, str):
        return storable(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {storable(str(key)): scrub(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(item) for item in value]
    return storable(str(value))


def decode(text: str | None) -> Any:
    """Parse JSON text read back from a store (``None`` stays ``None``)."""
    return None if text is None else json.loads(text)


def _find(value: Any, path: str, bad: Callable[[Any], bool], convert: Convert = None) -> str:
    """Return the path of the first element for which ``bad`` holds, or ``""``; each
    element as ``convert`` (a codec's) writes it, when given."""
    if convert is not None:
        value = convert(value)
    if bad(value):
        return path
    for child_path, child in _children(value, path, bad):
        found = child_path if child is _KEY else _find(child, child_path, bad, convert)
        if found:
            return found
    return ""


_KEY = object()
_JSON_KEY_TYPES = (str, int, float, bool, type(None))


def _key_text(key: Any) -> str:
    """A key as it reads in a path: ``["when"]`` for text, as in JSON and Python."""
    return json.dumps(key, ensure_ascii=False) if isinstance(key, str) else repr(key)


def _children(value: Any, path: str, bad: Callable[[Any], bool]) -> Iterator[tuple[str, Any]]:
    """The elements of a container with their paths; a bad dict key is reported as itself."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    elif callable(getattr(value, "model_dump", None)) and not isinstance(value, type):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        for key, item in value.items():
            if bad(key) or not isinstance(key, _JSON_KEY_TYPES):
                yield f"{path} key {key!r}", _KEY
            yield f"{path}[{_key_text(key)}]", item
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield f"{path}[{index}]", item
