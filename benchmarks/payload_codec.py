"""The payload codec's CPU cost, and whether ``orjson`` would lower it for the same
strictness: CPU µs per call (best of ``--repeat`` timings of ``--number`` calls), no store.

Rows: ``payloads.encode`` without a codec (the default), with a ``Codec`` on the same plain
payload, with a ``Codec`` on a typed one (a dataclass of datetimes, decimals, a UUID, an
enum); ``codec.decode`` of that back into its dataclass; ``json.loads``. With ``orjson``
importable (it is no dependency: install it beside to compare), its ``dumps``/``loads``
on the plain payload, and what it does with each value strict JSON refuses.

    python -m benchmarks.payload_codec
    python -m benchmarks.payload_codec --number 20000 --repeat 7 --json
"""

from __future__ import annotations

import argparse
import enum
import importlib
import json
import time
import timeit
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from simpleworkflow import errors, payloads
from simpleworkflow.codec import Codec


class Tier(enum.Enum):
    GOLD = "gold"


@dataclass
class Order:
    id: str
    customer: str
    placed_at: datetime
    total: Decimal
    tier: Tier
    ref: uuid.UUID
    lines: list[dict[str, Any]]


#: An order-sized payload (about 400 bytes of JSON), as plain data.
PLAIN = {
    "id": "o-12345",
    "customer": "c-987",
    "placed_at": "2026-11-28T09:30:00+00:00",
    "total": "1234.50",
    "tier": "gold",
    "ref": "12345678-1234-5678-1234-567812345678",
    "lines": [
        {"sku": f"sku-{i}", "qty": i, "price": 9.99 * i, "gift": i % 2 == 0} for i in range(6)
    ],
}
TYPED = Order(
    id="o-12345",
    customer="c-987",
    placed_at=datetime(2026, 11, 28, 9, 30, tzinfo=UTC),
    total=Decimal("1234.50"),
    tier=Tier.GOLD,
    ref=uuid.UUID("12345678-1234-5678-1234-567812345678"),
    lines=PLAIN["lines"],  # type: ignore[arg-type]
)
#: Values strict JSON refuses, to see what orjson does with each.
REFUSED = {
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "lone surrogate": "\ud800",
    "NUL": "a\x00b",
    "int past 64 bits": 2**70,
}


def micros(call: Callable[[], Any], number: int, repeat: int) -> float:
    # CPU time of this process: what other work on the machine does not count in
    return min(timeit.repeat(call, number=number, repeat=repeat, timer=time.process_time)) / (
        number / 1e6
    )


def measure(number: int, repeat: int) -> dict[str, Any]:
    codec = Codec()
    plain_text = payloads.encode(PLAIN)
    typed_data = json.loads(payloads.encode(TYPED, codec=codec))
    rows = {
        "encode, no codec (default)": micros(lambda: payloads.encode(PLAIN), number, repeat),
        "encode, codec, plain payload": micros(
            lambda: payloads.encode(PLAIN, codec=codec), number, repeat
        ),
        "encode, codec, typed payload": micros(
            lambda: payloads.encode(TYPED, codec=codec), number, repeat
        ),
        "decode, codec, into the dataclass": micros(
            lambda: codec.decode(typed_data, Order), number, repeat
        ),
        "json.loads": micros(lambda: json.loads(plain_text), number, repeat),
    }
    result: dict[str, Any] = {"bytes": len(plain_text), "micros": rows}
    try:
        orjson = importlib.import_module("orjson")  # no dependency: compared when installed
    except ImportError:
        result["orjson"] = "not installed"
        return result
    dumped = orjson.dumps(PLAIN)
    rows["orjson.dumps"] = micros(lambda: orjson.dumps(PLAIN), number, repeat)
    rows["orjson.loads"] = micros(lambda: orjson.loads(dumped), number, repeat)
    rows["NaN walk (what orjson would need)"] = micros(lambda: _has_nan(PLAIN), number, repeat)
    # The encoding step alone, which orjson would replace: json's (strict) against orjson's
    # text plus the walk that refuses NaN as json's does (orjson writes it as null).
    encoder = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
    rows["json encoder alone"] = micros(lambda: encoder.encode(PLAIN), number, repeat)
    rows["orjson text + NaN walk"] = micros(
        lambda: (orjson.dumps(PLAIN).decode(), _has_nan(PLAIN)), number, repeat
    )
    result["orjson"] = {name: _orjson_does(orjson, value) for name, value in REFUSED.items()}
    result["strict JSON"] = {name: _strict_does(value) for name, value in REFUSED.items()}
    return result


def _has_nan(value: Any) -> bool:
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, dict):
        return any(_has_nan(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_nan(item) for item in value)
    return False


def _orjson_does(orjson: Any, value: Any) -> str:
    try:
        return f"writes {orjson.dumps({'v': value}).decode(errors='replace')}"
    except orjson.JSONEncodeError as exc:
        return f"refuses ({exc})"


def _strict_does(value: Any) -> str:
    try:
        return f"writes {payloads.encode({'v': value})}"
    except errors.InvalidPayload as exc:
        return f"refuses ({type(exc).__name__})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=5000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings; the best is kept")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    result = measure(args.number, args.repeat)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"payload: {result['bytes']} bytes of JSON")
    for name, value in result["micros"].items():
        print(f"  {name:<40} {value:8.2f} µs")
    if isinstance(result["orjson"], str):
        print(f"orjson: {result['orjson']}")
        return
    for name, does in result["orjson"].items():
        print(f"  {name:<18} orjson {does}; strict JSON {result['strict JSON'][name]}")


if __name__ == "__main__":
    main()
