"""A codec: the values JSON lacks (datetimes, decimals, UUIDs, enums, dataclasses,
pydantic models, classes of the user's own) written as plain JSON, and read back by type.

The stored JSON names no Python type: a datetime is its ISO 8601 text, a ``Decimal`` its
digits as text, a UUID its canonical text, an enum its value, a dataclass an object of its
fields. So another runtime, SQL (``payload @> '{"order": "o-1"}'``) and the dashboard read
it as they read any payload. Reading back takes the type from a hint instead: a handler's
payload annotation, a step function's return annotation, or the type given to
:meth:`Codec.decode`. Without a codec (the default) payloads are today's strict JSON.
"""

from __future__ import annotations

import collections.abc as abc
import contextlib
import dataclasses
import datetime
import decimal
import enum
import functools
import inspect
import json
import types
import typing
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from simpleworkflow import errors, payloads

Encode = Callable[[Any], Any]
Decode = Callable[[Any], Any]

_NONE = type(None)
#: The generic containers a hint may name, and what each is made as.
_SEQUENCES: dict[Any, Callable[[Any], Any]] = {
    list: list,
    tuple: tuple,
    set: set,
    frozenset: frozenset,
    abc.Sequence: list,
    abc.MutableSequence: list,
    abc.Collection: list,
    abc.Iterable: list,
    abc.Set: frozenset,
    abc.MutableSet: set,
}
_MAPPINGS = {dict, abc.Mapping, abc.MutableMapping}


def _iso(value: datetime.date | datetime.time) -> str:
    return value.isoformat()


def _decimal_text(value: decimal.Decimal) -> str:
    if not value.is_finite():
        raise ValueError(f"{value} is NaN or infinite")  # payloads names where it is
    return str(value)


def _decimal(data: Any) -> decimal.Decimal:
    if isinstance(data, bool) or not isinstance(data, str | int | float):
        raise TypeError("expected text or a number")
    try:
        number = decimal.Decimal(str(data))
    except decimal.InvalidOperation:
        raise ValueError("not a number") from None
    if not number.is_finite():
        raise ValueError("NaN and infinities are refused")
    return number


def _text(parse: Callable[[str], Any]) -> Decode:
    def decode(data: Any) -> Any:
        if not isinstance(data, str):
            raise TypeError("expected text")
        return parse(data)

    return decode


#: The types every codec knows, each with its plain JSON form and back.
_STANDARD: dict[type, tuple[Encode, Decode]] = {
    datetime.datetime: (_iso, _text(datetime.datetime.fromisoformat)),
    datetime.date: (_iso, _text(datetime.date.fromisoformat)),
    datetime.time: (_iso, _text(datetime.time.fromisoformat)),
    decimal.Decimal: (_decimal_text, _decimal),
    uuid.UUID: (str, _text(uuid.UUID)),
}


class Codec:
    """How payloads, step results, signals, values and stream items are written as
    JSON and read back: give the same one to ``App(codec=...)`` and ``Client(codec=...)``.

    It writes datetimes, dates, times, ``Decimal``, ``UUID``, enums, dataclasses and
    pydantic models, and the classes given to :meth:`register`; it still refuses what JSON
    or a store cannot hold (NaN and infinities, NUL characters, lone surrogates, sets,
    bytes), with :class:`~simpleworkflow.errors.InvalidPayload`.
    """

    def __init__(self) -> None:
        self._registered: dict[type, tuple[Encode, Decode]] = {}
        self._encoders: dict[type, Encode | None] = {}  # by exact class, found once
        #: What ``payloads.encode`` writes with: strict, as without a codec.
        self.encoder = json.JSONEncoder(
            allow_nan=False, separators=(",", ":"), default=self.to_json
        )

    def register(self, cls: type, *, encode: Encode, decode: Decode) -> None:
        """Write instances of ``cls`` (and its subclasses) as ``encode(value)``, any JSON
        value, and read them back with ``decode(data)`` where a hint names ``cls``."""
        if not isinstance(cls, type) or not callable(encode) or not callable(decode):
            raise errors.InvalidArgument("register takes a class and two functions")
        self._registered[cls] = (encode, decode)
        self._encoders.clear()

    # -- writing ------------------------------------------------------------------------

    def to_json(self, value: Any) -> Any:
        """``value``'s JSON form: the JSON encoder's hook for what it cannot write."""
        cls = type(value)
        try:
            encode = self._encoders[cls]
        except KeyError:
            encode = self._encoders[cls] = self._encoder_for(cls)
        if encode is None:
            raise payloads.NotJSON(value)
        return encode(value)

    def _encoder_for(self, cls: type) -> Encode | None:
        for base in cls.__mro__:
            if base in self._registered:
                return self._registered[base][0]
        for base in cls.__mro__:
            if base in _STANDARD:
                return _STANDARD[base][0]
        if issubclass(cls, enum.Enum):
            return _enum_value
        if dataclasses.is_dataclass(cls):
            return _fields
        if callable(getattr(cls, "model_dump", None)):
            return _model
        return None

    # -- reading ------------------------------------------------------------------------

    def decode(self, data: Any, hint: Any, *, what: str = "value") -> Any:
        """``data`` (parsed JSON) as the type ``hint`` names: ``Order``, ``list[Order]``,
        ``datetime | None``, ``dict[str, Decimal]`` ...; ``Any`` or ``None`` leave it as is.
        Data that does not fit raises :class:`~simpleworkflow.errors.InvalidPayload`
        naming where (``what`` is the name of the whole)."""
        return self._decode(data, hint, what)

    def _decode(self, data: Any, hint: Any, where: str) -> Any:
        if hint is None or hint is Any or hint is object or isinstance(hint, str):
            return data
        origin = typing.get_origin(hint)
        if origin is not None:
            return self._generic(data, origin, typing.get_args(hint), where)
        if not isinstance(hint, type):
            return data  # a TypeVar, a NewType ...: nothing to convert to
        decode = self._decoder_for(hint)
        if decode is not None:
            if data is None and hint is not _NONE:
                raise _misfit(where, data, hint, "null")
            try:
                return decode(data)
            except errors.InvalidPayload:
                raise
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise _misfit(where, data, hint, exc) from None
        if dataclasses.is_dataclass(hint):
            return self._dataclass(data, hint, where)
        return data

    def _decoder_for(self, hint: type) -> Decode | None:
        if hint in self._registered:
            return self._registered[hint][1]
        if hint in _STANDARD:
            return _STANDARD[hint][1]
        if issubclass(hint, enum.Enum):
            return hint
        validate = getattr(hint, "model_validate", None)
        return validate if callable(validate) else None

    def _generic(self, data: Any, origin: Any, args: tuple[Any, ...], where: str) -> Any:
        if origin is typing.Union or origin is types.UnionType:
            return self._union(data, args, where)
        if origin is typing.Annotated:
            return self._decode(data, args[0], where)
        if origin in _SEQUENCES and args:
            return self._sequence(data, origin, args, where)
        if origin in _MAPPINGS and len(args) == 2:
            if not isinstance(data, dict):
                raise _misfit(where, data, origin, "expected an object")
            key, item = args
            return {
                self._decode(k, key, f"{where} key {k!r}"): self._decode(v, item, f"{where}[{k!r}]")
                for k, v in data.items()
            }
        return data  # Literal, Callable, type[...]: as it is

    def _union(self, data: Any, args: tuple[Any, ...], where: str) -> Any:
        """The first type of ``X | Y | None`` that ``data`` fits, in order."""
        if data is None and _NONE in args:
            return None
        arms = [arm for arm in args if arm is not _NONE]
        for arm in arms[:-1]:
            try:
                return self._decode(data, arm, where)
            except errors.InvalidPayload:
                continue
        return self._decode(data, arms[-1], where)

    def _sequence(self, data: Any, origin: Any, args: tuple[Any, ...], where: str) -> Any:
        if not isinstance(data, list):
            raise _misfit(where, data, origin, "expected an array")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(data):
                raise _misfit(where, data, origin, f"expected {len(args)} items")
            pairs = zip(data, args, strict=True)
            return tuple(self._decode(d, a, f"{where}[{i}]") for i, (d, a) in enumerate(pairs))
        make = _SEQUENCES[origin]
        return make(self._decode(item, args[0], f"{where}[{i}]") for i, item in enumerate(data))

    def _dataclass(self, data: Any, hint: type, where: str) -> Any:
        if not isinstance(data, dict):
            raise _misfit(where, data, hint, "expected an object")
        hints = _hints(hint)
        known = {field.name for field in dataclasses.fields(hint) if field.init}
        fields = {
            name: self._decode(value, hints.get(name), f"{where}[{name!r}]")
            for name, value in data.items()
            if name in known  # keys it does not know are left out, as pydantic's default
        }
        try:
            return hint(**fields)
        except (TypeError, ValueError) as exc:
            raise _misfit(where, data, hint, exc) from None


def _enum_value(value: enum.Enum) -> Any:
    return value.value


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass's fields, one level: the encoder writes each (through the codec)."""
    return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}


def _model(value: Any) -> Any:
    return value.model_dump(mode="json")


def _misfit(where: str, data: Any, hint: Any, why: object) -> errors.InvalidPayload:
    name = getattr(hint, "__name__", None) or str(hint)
    return errors.InvalidPayload(f"{where}: {data!r:.80} is not a {name} ({why})")


# -- hints ------------------------------------------------------------------------------

_HINTS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _hints(obj: Any) -> dict[str, Any]:
    """``obj``'s resolved annotations, found once per function or class; none when they
    cannot be resolved (a name imported only for type checkers)."""
    try:
        return _HINTS[obj]
    except (KeyError, TypeError):
        pass
    try:
        hints = typing.get_type_hints(obj, include_extras=True)
    except Exception:  # an unresolvable annotation: no hint
        hints = {}
    with contextlib.suppress(TypeError):  # not weakly referable: found again next time
        _HINTS[obj] = hints
    return hints


def _unwrapped(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def result_hint(fn: Callable[..., Any]) -> Any:
    """The type ``fn`` is annotated to return, or ``None``."""
    return _hints(_unwrapped(fn)).get("return")


def payload_hint(fn: Callable[..., Any]) -> Any:
    """The type of a handler's payload: its first parameter's annotation, or ``None``."""
    fn = _unwrapped(fn)
    try:
        first = next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        return None
    return None if first is None else _hints(fn).get(first)
