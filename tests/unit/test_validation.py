"""The pure checks behind the API: type names, prefixes, run ids, payloads, durations and
times."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pydantic
import pytest

from simpleworkflow import RetryPolicy, durations, errors, names, payloads

# -- type names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "content.thumbnail.v1",
        "billing.invoice.send.v2",
        "notify.email.v10",
        "a.b.v0",
        "my_domain.sub_area.do_it.v3",
        "x9.y8.z7.v1",
        "a." * 97 + "v1",  # 196 characters + 2: right at the limit
    ],
)
def test_valid_type_names(name: str) -> None:
    assert names.validate_type(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "",
        "content",
        "content.thumbnail",
        "a.v1",  # <domain>.<subdomain> are both required
        "Content.thumbnail.v1",
        "content.Thumbnail.v1",
        "content.thumbnail.V1",
        "content.thumbnail.v",
        "content.thumbnail.v1.5",
        "content.thumbnail.1",
        "content..thumbnail.v1",
        ".content.thumbnail.v1",
        "content.thumbnail.v1.",
        "1content.thumbnail.v1",
        "_content.thumbnail.v1",
        "content-x.thumbnail.v1",
        "content.thumb nail.v1",
        "content.thumbnail.v1\n",
        "contenté.thumbnail.v1",
        "billing.%.v1",
    ],
)
def test_invalid_type_names(name: str) -> None:
    with pytest.raises(errors.InvalidTypeName) as caught:
        names.validate_type(name)
    assert "content.thumbnail.v1" in str(caught.value)  # the message shows a good name


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("", "it is empty"),
        ("Content.thumbnail.v1", "upper-case letters"),
        ("content.thumbnail", "must end in a version segment such as '.v1', not 'thumbnail'"),
        ("content.thumbnail.v1.5", "must end in a version segment such as '.v1', not '5'"),
        ("billing.v1", "at least two segments before the version"),
        ("content..thumbnail.v1", "empty segment"),
        ("content.thumbnail.v1.", "empty segment"),
        ("1content.thumbnail.v1", "segment '1content' must start with a letter"),
        ("content-x.thumbnail.v1", "segment 'content-x' must start with a letter and hold only"),
    ],
)
def test_an_invalid_type_name_is_told_the_rule_it_breaks(name: str, rule: str) -> None:
    with pytest.raises(errors.InvalidTypeName) as caught:
        names.validate_type(name)
    assert f"invalid workflow type {name!r}: " in str(caught.value)
    assert rule in str(caught.value)


@pytest.mark.parametrize("name", [None, 1, b"content.thumbnail.v1", ["a.b.v1"]])
def test_type_names_must_be_strings(name: Any) -> None:
    with pytest.raises(errors.InvalidTypeName, match="must be a string"):
        names.validate_type(name)


def test_type_name_length_limit() -> None:
    name = "a" * (names.MAX_TYPE_LENGTH - 5) + ".b.v1"
    assert names.validate_type(name) == name
    with pytest.raises(errors.InvalidTypeName, match="limit"):
        names.validate_type("a" + name)


# -- prefixes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "pattern"),
    [
        ("billing.%", "billing.%"),
        ("billing.", "billing.%"),
        ("billing", "billing.%"),
        ("billing.payment", "billing.payment.%"),
        ("billing.invoice.v1", "billing.invoice.v1"),
        ("bill%", "bill%"),
        ("%", "%"),
        ("", "%"),
        ("bill_ing.%", "bill\\_ing.%"),
        ("a_b.c_d.v1", "a\\_b.c\\_d.v1"),
    ],
)
def test_like_patterns(prefix: str, pattern: str) -> None:
    assert names.like_pattern(prefix) == pattern


@pytest.mark.parametrize("prefix", ["Billing.%", "billing.%.v1", "%billing", "a b", "a..", None])
def test_bad_prefixes(prefix: Any) -> None:
    with pytest.raises(errors.InvalidArgument, match="prefix"):
        names.like_pattern(prefix)


# -- run ids ----------------------------------------------------------------------------


def test_run_ids_are_normalised() -> None:
    raw = uuid.uuid4()
    canonical = str(raw)
    for spelling in [canonical, canonical.upper(), raw.hex, f"{{{canonical}}}", raw]:
        assert names.normalize_run_id(spelling) == canonical


@pytest.mark.parametrize("run_id", ["", "nope", "1234", "g" * 32, 5, None, b"x"])
def test_malformed_run_ids_are_not_found(run_id: Any) -> None:
    with pytest.raises(errors.RunNotFound, match="not a run id"):
        names.normalize_run_id(run_id)


# -- payloads ---------------------------------------------------------------------------


def test_payloads_are_compact_json() -> None:
    assert payloads.encode({"a": [1, 2], "b": None}) == '{"a":[1,2],"b":null}'
    assert payloads.encode("é") == '"\\u00e9"'
    assert payloads.encode((1, 2)) == "[1,2]"


def test_decode_reverses_encode() -> None:
    value = {"text": "Zoë 😀", "n": [1, 2.5, None, True]}
    assert payloads.decode(payloads.encode(value)) == value
    assert payloads.decode(None) is None


@dataclasses.dataclass
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Shape:
    name: str
    points: list[Point]


class Model(pydantic.BaseModel):
    when: timedelta
    shape: dict[str, int]


def test_dataclasses_and_models_become_plain_json() -> None:
    shape = Shape("line", [Point(0, 0), Point(1, 2)])
    assert json.loads(payloads.encode(shape)) == {
        "name": "line",
        "points": [{"x": 0, "y": 0}, {"x": 1, "y": 2}],
    }
    model = Model(when=timedelta(minutes=1), shape={"a": 1})
    assert json.loads(payloads.encode({"m": model})) == {"m": {"when": "PT1M", "shape": {"a": 1}}}


def test_classes_themselves_are_not_payloads() -> None:
    with pytest.raises(errors.InvalidPayload):
        payloads.encode({"cls": Point})
    with pytest.raises(errors.InvalidPayload):
        payloads.encode(Model)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (float("nan"), "payload is NaN"),
        ({"a": {"b": [0, float("inf")]}}, 'payload["a"]["b"][1] is NaN'),
        ([Point(0, 0), {"p": float("nan")}], 'payload[1]["p"] is NaN'),
        ({"s": "a\x00b"}, 'payload["s"] contains a NUL'),
        ({"k\x00": 1}, "payload key 'k\\x00' contains a NUL"),
        ([["x", ["\x00"]]], "payload[0][1][0] contains a NUL"),
        ({"s": "\udc80"}, 'payload["s"] contains a lone surrogate'),
        ({"when": datetime(2030, 1, 1, tzinfo=UTC)}, 'payload["when"]: a value of type datetime'),
        ({"a": [1, {"b": Decimal("1.5")}]}, 'payload["a"][1]["b"]: a value of type Decimal'),
        ([Shape("s", [Point(0, 0)]), {"id": uuid.uuid4()}], 'payload[1]["id"]: a value of type'),
        ({"tags": {"x"}}, 'payload["tags"]: a value of type set is not JSON'),
        ({"cls": Point}, 'payload["cls"]: a value of type type is not JSON'),
        ({"k": {(1, 2): "v"}}, 'payload["k"] key (1, 2) is not JSON'),
    ],
)
def test_bad_values_are_named_by_their_path(value: Any, where: str) -> None:
    with pytest.raises(errors.InvalidPayload) as caught:
        payloads.encode(value)
    assert where in str(caught.value)


def test_the_path_names_what_is_being_encoded() -> None:
    with pytest.raises(errors.InvalidPayload, match=r'result\["x"\]'):
        payloads.encode({"x": float("nan")}, what="result")


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (b"raw", "base64"),
        (bytearray(b"raw"), "base64"),
        ({1, 2}, "list instead of a set"),
        (frozenset(), "list instead of a set"),
        (object(), "object"),
        (1 + 2j, "complex"),
        ({(1, 2): "tuple key"}, "not JSON"),
    ],
)
def test_non_json_values_are_refused_with_a_hint(value: Any, hint: str) -> None:
    with pytest.raises(errors.InvalidPayload, match=hint):
        payloads.encode({"v": value})


def test_cycles_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    ring: dict[str, Any] = {"a": [1]}
    ring["a"].append({"back": ring})
    for value in (loop, ring, [1, {"deep": loop}]):
        with pytest.raises(errors.InvalidPayload, match="payload contains a reference cycle"):
            payloads.encode(value)


def test_text_that_only_looks_like_an_escape_is_fine() -> None:
    value = {"a": "\\u0000", "b": "\\ud800", "emoji": "😀"}
    assert payloads.decode(payloads.encode(value)) == value


def nested(levels: int, leaf: Any = None) -> Any:
    """``levels`` arrays and objects, each within the one before."""
    value = leaf
    for level in range(levels):
        value = [value] if level % 2 else {"k": value}
    return value


def test_payloads_nest_at_most_512_levels_deep() -> None:
    """Deeper than every reader can parse again on its own call stack (the API's listing
    wraps each payload in two more levels): refused, however it is written."""
    assert payloads.decode(payloads.encode(nested(512))) == nested(512)
    for deep in (nested(513), [nested(600)], {"a": 1, "b": nested(900)}):
        with pytest.raises(errors.InvalidPayload, match="nested more than 512 levels deep"):
            payloads.encode(deep, what="result")
    # Brackets inside strings are text, and many shallow containers are no depth.
    brackets = {"text": "[{" * 1000 + '\\"' + "[" * 600, "rows": [{"a": [1]}] * 2000}
    assert payloads.decode(payloads.encode(brackets)) == brackets


def test_size_limit_counts_bytes_of_json() -> None:
    assert payloads.encode("x" * 8, max_bytes=10) == '"xxxxxxxx"'
    with pytest.raises(errors.PayloadTooLarge, match="11 bytes"):
        payloads.encode("x" * 9, max_bytes=10)
    # "é" is written as the six ASCII characters \u00e9
    with pytest.raises(errors.PayloadTooLarge):
        payloads.encode("é" * 2, max_bytes=10)
    assert issubclass(errors.PayloadTooLarge, errors.InvalidPayload)
    assert payloads.DEFAULT_MAX_BYTES == 1024 * 1024


# -- durations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (90, 90.0),
        (1.5, 1.5),
        (timedelta(minutes=2), 120.0),
        ("45", 45.0),
        ("2.5", 2.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2d", 172800.0),
        ("1w", 604800.0),
        ("250ms", 0.25),
        ("1m30s500ms", 90.5),
        ("1.5h", 5400.0),
        (" 5M ", 300.0),
    ],
)
def test_durations(value: Any, seconds: float) -> None:
    assert durations.to_seconds(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value",
    [-1, -0.5, timedelta(seconds=-1), float("nan"), float("inf"), True, None, [5], "", "5x",
     "m5", "5 m", "1h 30m", "-5s", "5s5", "five"],
)  # fmt: skip
def test_bad_durations(value: Any) -> None:
    with pytest.raises(errors.InvalidArgument, match="timeout"):
        durations.to_seconds(value, what="timeout")


# -- the range of durations and times ---------------------------------------------------

PLUS_14 = timezone(timedelta(hours=14))
MINUS_14 = timezone(timedelta(hours=-14))


@pytest.mark.parametrize(
    "value",
    [durations.MAX_SECONDS, float(durations.MAX_SECONDS), timedelta(days=100 * 366), "36600d"],
)
def test_a_duration_of_100_years_is_the_longest(value: Any) -> None:
    assert durations.to_seconds(value) == durations.MAX_SECONDS


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (durations.MAX_SECONDS + 1, str(durations.MAX_SECONDS + 1)),
        ("999999999d", "'999999999d'"),
        (1e300, "1e+300"),
        (10**400, "1000000"),  # an int no float holds, shortened
        (timedelta(days=36601), "timedelta(days=36601)"),
        ("5300w", "'5300w'"),
    ],
)
def test_a_longer_duration_is_refused_naming_the_value_and_the_range(
    value: Any, shown: str
) -> None:
    with pytest.raises(errors.InvalidArgument) as caught:
        durations.to_seconds(value, what="deadline")
    message = str(caught.value)
    assert message.startswith("deadline must be at most 100 years (3162240000 seconds)")
    assert shown in message and len(message) < 160


@pytest.mark.parametrize(
    "moment",
    [
        durations.EARLIEST,
        durations.EARLIEST.astimezone(PLUS_14),
        durations.EARLIEST.astimezone(MINUS_14),
        durations.LATEST,
        durations.LATEST.astimezone(PLUS_14),  # 9999-01-01T13:59:59+14:00
        durations.LATEST.astimezone(MINUS_14),
        datetime(2030, 1, 31, 9, tzinfo=UTC),
    ],
)
def test_times_in_the_range_pass_as_given(moment: datetime) -> None:
    assert durations.check_time(moment, what="run_at") is moment
    assert durations.parse_time(moment.isoformat(), what="run_at") == moment
    assert durations.duration_or_time(moment.isoformat(), what="deadline") == moment


@pytest.mark.parametrize(
    "moment",
    [
        datetime(1, 1, 1, tzinfo=PLUS_14),  # year 0 in UTC: Python cannot even convert it
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=MINUS_14),  # year 10000 in UTC
        datetime(1, 1, 1, tzinfo=UTC),  # year 0 in any zone west of UTC
        datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),  # year 10000 east of it
        durations.EARLIEST - timedelta(microseconds=1),
        durations.LATEST + timedelta(microseconds=1),
    ],
)
def test_times_out_of_the_range_are_refused_naming_the_value_and_the_range(
    moment: datetime,
) -> None:
    for check in (
        lambda: durations.check_time(moment, what="run_at"),
        lambda: durations.parse_time(moment.isoformat(), what="run_at"),
        lambda: durations.duration_or_time(moment.isoformat(), what="run_at"),
    ):
        with pytest.raises(errors.InvalidArgument) as caught:
            check()
        message = str(caught.value)
        assert message.startswith("run_at must be a time from 0002-01-01T00:00:00Z to ")
        assert "9998-12-31T23:59:59Z" in message and moment.isoformat()[:19] in message


@pytest.mark.parametrize("value", [datetime(2030, 1, 1), "2030-01-01T00:00:00Z", 5, None])
def test_a_time_must_be_an_aware_datetime(value: Any) -> None:
    with pytest.raises(errors.InvalidArgument, match="sleep_until's time must be a timezone"):
        durations.check_time(value, what="sleep_until's time")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("999999999d", "at most 100 years"),
        ("1e400", "finite"),
        ("tomorrow", "a duration like 1h or 3d, or a time"),
        ("2030-01-31T09:00:00", "a duration like 1h or 3d, or a time"),  # no offset
        ("0001-01-01T00:00:00+14:00", "from 0002-01-01T00:00:00Z"),
    ],
)
def test_a_deadline_in_text_is_refused_for_what_it_is(text: str, says: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=f"^--deadline .*{says}"):
        durations.duration_or_time(text, what="--deadline")


def test_a_form_time_without_an_offset_is_utc() -> None:
    found = durations.parse_time("2030-01-31T09:00", what="created_since", naive_utc=True)
    assert found == datetime(2030, 1, 31, 9, tzinfo=UTC)
    with pytest.raises(errors.InvalidArgument, match="created_since must be a time from"):
        durations.parse_time("0001-01-01T00:00", what="created_since", naive_utc=True)


# -- retry policies: the durations they make ---------------------------------------------


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"base": "999999999d"}, "retry base must be at most 100 years"),
        ({"cap": 1e300}, "retry cap must be at most 100 years"),
        ({"factor": float("nan")}, "factor must be a finite number, at least 1, not nan"),
        ({"factor": float("inf")}, "factor must be a finite number"),
        ({"factor": "2"}, "factor must be a finite number"),
        ({"factor": 0.5}, "factor must be a finite number, at least 1"),
        ({"jitter": float("nan")}, "jitter must be within 0..1, not nan"),
        ({"jitter": 2}, "jitter must be within 0..1"),
    ],
)
def test_a_retry_policy_is_checked_when_it_is_made(settings: dict[str, Any], says: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=re.escape(says)):
        RetryPolicy(**settings)


def test_a_retry_delay_stays_within_its_cap_however_steep_the_backoff() -> None:
    """base * factor ** (n - 1) overflows a float long before the attempts run out (a run may
    have 10,000): the delay is the cap then, not an OverflowError in the worker."""
    steep = RetryPolicy(backoff="exponential", base=1, factor=1e6, cap="1h", jitter=0.5)
    assert [steep.delay(n, rand=lambda: 1.0) for n in (1, 2, 100, 10_000)] == [
        1.5,
        5400.0,
        5400.0,
        5400.0,
    ]
    longest = RetryPolicy(backoff="quadratic", base="36600d", cap="36600d", jitter=1)
    assert longest.delay(10_000, rand=lambda: 1.0) == 2 * durations.MAX_SECONDS
