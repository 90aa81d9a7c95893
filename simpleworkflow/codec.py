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
        self._readers: dict[Any, Reader | None] = {}  # by hint, made once
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
        self._readers.clear()

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
        read = self._reader(hint)
        if read is None:
            return data
        try:
            return read(data)
        except _Misfit as misfit:
            raise misfit.error(what) from None

    def _reader(self, hint: Any) -> Reader | None:
        """How to read ``hint`` (``None``: as it is), made once per hint."""
        try:
            return self._readers[hint]
        except KeyError:
            read = self._readers[hint] = self._make_reader(hint)
            return read
        except TypeError:  # an unhashable hint (Annotated with a list ...): made each time
            return self._make_reader(hint)

    def _make_reader(self, hint: Any) -> Reader | None:
        if hint is None or isinstance(hint, str) or hint in _AS_IS:
            return None
        origin = typing.get_origin(hint)
        if origin is not None:
            return self._generic(hint, origin, typing.get_args(hint))
        if not isinstance(hint, type):
            return None  # a TypeVar, a NewType ...: nothing to convert to
        decode = self._decoder_for(hint)
        if decode is not None:
            return _leaf(decode, hint)
        if dataclasses.is_dataclass(hint):
            return self._dataclass(hint)
        return None

    def _decoder_for(self, hint: type) -> Decode | None:
        if hint in self._registered:
            return self._registered[hint][1]
        if hint in _STANDARD:
            return _STANDARD[hint][1]
        if issubclass(hint, enum.Enum):
            return hint
        validate = getattr(hint, "model_validate", None)
        return validate if callable(validate) else None

    def _generic(self, hint: Any, origin: Any, args: tuple[Any, ...]) -> Reader | None:
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args)
        if origin is typing.Annotated:
            return self._reader(args[0])
        if origin in _SEQUENCES and args:
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                return _fixed_tuple(hint, [self._reader(arg) for arg in args])
            return _sequence(origin, self._reader(args[0]))
        if origin in _MAPPINGS and len(args) == 2:
            return _mapping(origin, self._reader(args[0]), self._reader(args[1]))
        return None  # Literal, Callable, type[...]: as it is

    def _union(self, args: tuple[Any, ...]) -> Reader | None:
        """The first type of ``X | Y | None`` that the data fits, in order."""
        optional = _NONE in args
        arms = [self._reader(arm) for arm in args if arm is not _NONE]
        if any(arm is None for arm in arms):
            return None  # one type takes any data as it is
        readers = typing.cast(list[Reader], arms)

        def read(data: Any) -> Any:
            if data is None and optional:
                return None
            for arm in readers[:-1]:
                try:
                    return arm(data)
                except _Misfit:
                    continue
            return readers[-1](data)

        return read

    def _dataclass(self, hint: type) -> Reader:
        """Read an object into dataclass ``hint``: its fields by their annotations (found
        at the first read, so that a class may hold itself), other keys left out."""
        plan: dict[str, Reader | None] = {}

        def read(data: Any) -> Any:
            if not isinstance(data, dict):
                raise _Misfit(data, hint, "expected an object")
            if not plan:
                hints = _hints(hint)
                fields = dataclasses.fields(hint)
                plan.update((f.name, self._reader(hints.get(f.name))) for f in fields if f.init)
            kwargs = {}
            for name, value in data.items():
                if name not in plan:
                    continue  # keys it does not know are left out, as pydantic's default
                field_reader = plan[name]
                kwargs[name] = value if field_reader is None else _at(field_reader, value, name)
            try:
                return hint(**kwargs)
            except (TypeError, ValueError) as exc:
                raise _Misfit(data, hint, exc) from None

        return read


Reader = Callable[[Any], Any]
_AS_IS = frozenset({Any, object, str, int, float, bool, dict, list, _NONE})


class _Misfit(Exception):
    """Data that does not fit its hint; each container it is in adds its key to ``path``."""

    def __init__(self, data: Any, hint: Any, why: object) -> None:
        self.data, self.hint, self.why = data, hint, why
        self.path: list[str] = []

    def error(self, what: str) -> errors.InvalidPayload:
        where = what + "".join(reversed(self.path))
        generic = typing.get_origin(self.hint) is not None
        name = str(self.hint) if generic else getattr(self.hint, "__name__", str(self.hint))
        return errors.InvalidPayload(f"{where}: {self.data!r:.80} is not a {name} ({self.why})")


def _at(read: Reader, data: Any, key: object) -> Any:
    """``read(data)`` for the item ``key`` of a container: a misfit names the key."""
    try:
        return read(data)
    except _Misfit as misfit:
        misfit.path.append(f"[{key!r}]")
        raise


def _leaf(decode: Decode, hint: type) -> Reader:
    def read(data: Any) -> Any:
        if data is None:
            raise _Misfit(data, hint, "null")
        try:
            return decode(data)
        except errors.InvalidPayload:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise _Misfit(data, hint, exc) from None

    return read


def _sequence(origin: Any, item: Reader | None) -> Reader:
    make = _SEQUENCES[origin]

    def read(data: Any) -> Any:
        if not isinstance(data, list):
            raise _Misfit(data, origin, "expected an array")
        if item is None:
            return make(data)
        return make([_at(item, value, index) for index, value in enumerate(data)])

    return read


def _fixed_tuple(hint: Any, items: list[Reader | None]) -> Reader:
    def read(data: Any) -> Any:
        if not isinstance(data, list) or len(data) != len(items):
            raise _Misfit(data, hint, f"expected an array of {len(items)} items")
        return tuple(
            value if item is None else _at(item, value, index)
            for index, (item, value) in enumerate(zip(items, data, strict=True))
        )

    return read


def _mapping(origin: Any, key: Reader | None, item: Reader | None) -> Reader:
    def read(data: Any) -> Any:
        if not isinstance(data, dict):
            raise _Misfit(data, origin, "expected an object")
        if key is None and item is None:
            return dict(data)
        return {
            k if key is None else _at(key, k, k): v if item is None else _at(item, v, k)
            for k, v in data.items()
        }

    return read


def _enum_value(value: enum.Enum) -> Any:
    return value.value


def _fields(value: Any) -> dict[str, Any]:
    """A dataclass's fields, one level: the encoder writes each (through the codec)."""
    return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}


def _model(value: Any) -> Any:
    return value.model_dump(mode="json")


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


#: Where :func:`payload_hint` keeps its answer among a function's hints (no name is this).
_FIRST = "(first parameter)"


def payload_hint(fn: Callable[..., Any]) -> Any:
    """The type of a handler's payload: its first parameter's annotation, or ``None``;
    found once per function, as its hints are."""
    fn = _unwrapped(fn)
    hints = _hints(fn)
    if _FIRST not in hints:
        try:
            first = next(iter(inspect.signature(fn).parameters), None)
        except (TypeError, ValueError):
            first = None
        hints[_FIRST] = None if first is None else hints.get(first)
    return hints[_FIRST]


#: What reads a ``type=`` where no codec was given: the standard types, enums,
#: dataclasses and pydantic models, no class of the user's own.
_DEFAULT = Codec()


def reading(codec: Codec | None) -> Codec:
    """The codec that reads a ``type=`` given to a read (``ctx.wait_for_event``,
    ``client.wait`` ...): ``codec``, or without one a default :class:`Codec`. Reading
    needs no codec of the writer's: the stored JSON names no type either way."""
    return _DEFAULT if codec is None else codec
