"""The payload codec without a store: what each type is written as, what a hint reads it
back as, the refusals it keeps (with where they are), classes registered by the user,
and that without a codec the encoder is the strict one of before."""

from __future__ import annotations

import enum
import functools
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any

import pydantic
import pytest

from simpleworkflow import errors, payloads
from simpleworkflow.codec import Codec, payload_hint, result_hint

if TYPE_CHECKING:
    from collections import OrderedDict


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


class Size(enum.IntEnum):
    S = 1


@dataclass
class Line:
    sku: str
    price: Decimal
    shipped: date | None = None
    internal: int = field(default=0, init=False)


@dataclass
class Cart:
    lines: list[Line]
    at: datetime
    tags: tuple[str, ...] = ()


class Customer(pydantic.BaseModel):
    id: uuid.UUID
    since: datetime


class Money:
    def __init__(self, cents: int, currency: str) -> None:
        self.cents, self.currency = cents, currency

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Money) and (self.cents, self.currency) == (
            other.cents,
            other.currency,
        )


AT = datetime(2026, 11, 28, 1, 2, 3, 456789, tzinfo=UTC)
ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def written(value: Any, codec: Codec | None = None) -> Any:
    return json.loads(payloads.encode(value, codec=codec or Codec()))


def test_each_type_is_written_as_plain_json() -> None:
    cart = Cart([Line("a", Decimal("1.50"), date(2026, 1, 2))], AT, ("x",))
    assert written(
        {
            "at": AT,
            "day": date(2026, 1, 2),
            "time": time(9, 30),
            "amount": Decimal("-0.000100"),
            "id": ID,
            "color": Color.BLUE,
            "size": Size.S,
            "cart": cart,
            "customer": Customer(id=ID, since=AT),
        }
    ) == {
        "at": "2026-11-28T01:02:03.456789+00:00",
        "day": "2026-01-02",
        "time": "09:30:00",
        "amount": "-0.000100",
        "id": "12345678-1234-5678-1234-567812345678",
        "color": 2,
        "size": 1,
        "cart": {
            "lines": [{"sku": "a", "price": "1.50", "shipped": "2026-01-02", "internal": 0}],
            "at": "2026-11-28T01:02:03.456789+00:00",
            "tags": ["x"],
        },
        "customer": {
            "id": "12345678-1234-5678-1234-567812345678",
            "since": "2026-11-28T01:02:03.456789Z",
        },
    }


def test_a_hint_reads_each_type_back() -> None:
    codec = Codec()
    cart = Cart([Line("a", Decimal("1.50"), date(2026, 1, 2)), Line("b", Decimal(3))], AT, ("x",))
    assert codec.decode(written(cart), Cart) == cart
    assert codec.decode(written(Customer(id=ID, since=AT)), Customer) == Customer(id=ID, since=AT)
    assert codec.decode(written([Color.RED, None]), list[Color | None]) == [Color.RED, None]
    assert codec.decode(written({"a": AT}), dict[str, datetime]) == {"a": AT}
    assert codec.decode(written([ID, ID]), set[uuid.UUID]) == {ID}
    assert codec.decode(written((AT, 1)), tuple[datetime, int]) == (AT, 1)
    assert codec.decode("1.5", Annotated[Decimal, "money"]) == Decimal("1.5")
    assert codec.decode(written(time(9, 30)), time) == time(9, 30)
    assert codec.decode(2, Decimal) == Decimal(2)  # a number another runtime wrote
    # Without a type to read into, the JSON stays as it is.
    assert codec.decode({"at": "x"}, Any) == {"at": "x"}
    assert codec.decode({"at": "x"}, None) == {"at": "x"}
    assert codec.decode({"at": "x"}, dict) == {"at": "x"}


def test_data_that_does_not_fit_is_refused_naming_where() -> None:
    codec = Codec()
    cases: list[tuple[Any, Any, str]] = [
        (
            {"lines": [{"sku": "a", "price": "x"}], "at": "2026-01-01"},
            Cart,
            r"payload\['lines'\]\[0\]\['price'\]: 'x' is not a Decimal",
        ),
        ({"lines": [], "at": 5}, Cart, r"payload\['at'\]: 5 is not a datetime"),
        ({"lines": []}, Cart, r"payload: .* is not a Cart \(.*missing.*'at'"),
        ([1], Cart, r"payload: \[1\] is not a Cart \(expected an object\)"),
        ("NaN", Decimal, r"payload: 'NaN' is not a Decimal"),
        (None, datetime, r"payload: None is not a datetime"),
        ("purple", Color, r"payload: 'purple' is not a Color"),
        ({"id": "nope", "since": "2026-01-01"}, Customer, r"payload: .* is not a Customer"),
        ({"a": 1}, list[int], r"payload: .* is not a list \(expected an array\)"),
        ([1, 2, 3], tuple[int, int], r"not a tuple\[int, int\] \(expected an array of 2 items"),
    ]
    for data, hint, message in cases:
        with pytest.raises(errors.InvalidPayload, match=message):
            codec.decode(data, hint, what="payload")


def test_keys_a_dataclass_does_not_know_are_left_out() -> None:
    data = {"sku": "a", "price": "1", "internal": 7, "added_later": True}
    assert Codec().decode(data, Line) == Line("a", Decimal(1))


def test_what_no_store_holds_is_refused_as_without_a_codec() -> None:
    codec = Codec()
    refused = [
        (float("nan"), "payload is NaN or infinite"),
        (Line("a", Decimal("NaN")), r'payload\["price"\] is NaN or infinite'),
        ({"d": [Decimal("-Infinity")]}, r'payload\["d"\]\[0\] is NaN or infinite'),
        (Line("a\x00", Decimal(1)), r'payload\["sku"\] contains a NUL'),
        ({"x": Line("\udc80", Decimal(1))}, r'payload\["x"\]\["sku"\] contains a lone surrogate'),
        ({"s": {1}}, r'payload\["s"\]: a value of type set is not JSON; use a list'),
        ({"b": b"x"}, r'payload\["b"\]: a value of type bytes is not JSON'),
        ({ID: 1}, "is not JSON"),
    ]
    for value, message in refused:
        with pytest.raises(errors.InvalidPayload, match=message):
            payloads.encode(value, codec=codec)
    with pytest.raises(errors.PayloadTooLarge):
        payloads.encode([AT] * 100, codec=codec, max_bytes=1000)


def test_without_a_codec_the_types_are_refused_as_before() -> None:
    with pytest.raises(errors.InvalidPayload, match=r"datetime is not JSON; send it as text"):
        payloads.encode({"at": AT})
    with pytest.raises(errors.InvalidPayload, match=r"Decimal is not JSON"):
        payloads.encode(Line("a", Decimal(1)))


def test_a_registered_class_is_written_and_read_its_way() -> None:
    codec = Codec()
    codec.register(
        Money,
        encode=lambda m: {"cents": m.cents, "currency": m.currency},
        decode=lambda d: Money(d["cents"], d["currency"]),
    )
    # A class of the user's own may also take a standard type over.
    codec.register(
        datetime, encode=lambda d: d.timestamp(), decode=lambda s: datetime.fromtimestamp(s, UTC)
    )
    value = {"price": Money(150, "EUR"), "at": AT}
    assert written(value, codec) == {
        "price": {"cents": 150, "currency": "EUR"},
        "at": AT.timestamp(),
    }
    assert codec.decode(written(value, codec), dict[str, Money | datetime]) == value
    with pytest.raises(errors.InvalidPayload, match=r"payload\['price'\]: 'x' is not a Money"):
        codec.decode({"price": "x"}, dict[str, Money], what="payload")
    with pytest.raises(errors.InvalidArgument):
        codec.register("Money", encode=str, decode=str)  # type: ignore[arg-type]


def test_hints_come_from_annotations_or_are_none() -> None:
    def handler(order: Cart, ctx: Any) -> Line: ...

    def unresolvable(order: OrderedDict[str, int]) -> OrderedDict[str, int]: ...

    assert payload_hint(handler) == Cart
    assert result_hint(handler) == Line
    assert result_hint(functools.partial(handler, None)) == Line
    assert result_hint(lambda: AT) is None
    assert payload_hint(unresolvable) is None and result_hint(unresolvable) is None
    assert payload_hint(lambda: None) is None
