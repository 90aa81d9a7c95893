"""Hypothesis strategies for every public input of simpleworkflow, shared by the property
suites (tests/*/test_properties*.py), and the settings that keep them reproducible in CI.

The strategies lean on what breaks stores and parsers: NUL and lone surrogates, text
longer than any limit, integers past every column, NaN and infinities, nesting deeper
than a recursion limit, times at the ends of the calendar in the farthest time zones,
and durations of a billion days. Each value is one a caller can really pass.

``SIMPLEWORKFLOW_HYPOTHESIS_EXAMPLES`` raises (or lowers) the number of examples of every
property, e.g. ``=2000`` for a long run before a release; the default keeps the suite
under a minute and a half.
"""

from __future__ import annotations

import json
import os
import string
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from simpleworkflow import names
from simpleworkflow import payloads as payload_json

F = TypeVar("F", bound=Callable[..., Any])

EXAMPLES_VARIABLE = "SIMPLEWORKFLOW_HYPOTHESIS_EXAMPLES"


def bounded(examples: int) -> Callable[[F], F]:
    """The settings of one property: ``examples`` examples (or the environment's number),
    no deadline (the machine may be loaded), the same examples on every run, no database
    of failures carried between runs."""
    wanted = os.environ.get(EXAMPLES_VARIABLE, "").strip()
    return settings(
        max_examples=int(wanted) if wanted else examples,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        # no explain phase: it reruns a failure hundreds of times to say which parts vary
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,  # one store serves every example
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# -- text ----------------------------------------------------------------------------------

#: Characters that stores, drivers, terminals or JSON treat specially.
SPECIAL_CHARACTERS = [
    "\x00",  # Postgres text and jsonb refuse it
    "\ud800",  # lone surrogates: not Unicode text
    "\udfff",
    "\udcff",  # what surrogateescape makes of an undecodable byte (argv, file names)
    "\u2028",  # line separator: a newline to some parsers
    "\ufeff",
    "\x1b",
    "\n",
    "\\",
    '"',
    "%",
    "_",
    "😀",  # beyond the BMP: a surrogate pair in escaped JSON
    "\u0301",
]

_characters = st.one_of(
    st.sampled_from(SPECIAL_CHARACTERS),
    st.characters(exclude_categories=()),
    st.sampled_from(string.ascii_letters + string.digits + ".-:"),
)

#: Long text: around the limits (keys 512, step names 200, payloads 1 MiB) and past them.
long_text = st.builds(
    lambda char, n: char * n,
    st.sampled_from(["x", "é", "😀", "\x00"]),
    st.one_of(
        st.sampled_from([199, 200, 201, 511, 512, 513, 1_048_570, 1_048_577]),
        st.integers(0, 5000),
    ),
)

odd_text = st.one_of(
    st.lists(_characters, max_size=12).map("".join),
    st.sampled_from(SPECIAL_CHARACTERS),
    st.just(""),
    long_text,
)

#: Valid versioned type names (``a.b.v1``), as a worker's prefix ``prop.`` would own.
valid_types = st.from_regex(r"\A[a-z][a-z0-9_]{0,8}(\.[a-z][a-z0-9_]{0,8}){1,3}\.v[0-9]{1,3}\Z")

type_names = st.one_of(
    valid_types,
    odd_text,
    st.sampled_from(
        [
            "content.thumbnail.v1",
            "Content.thumbnail.v1",
            "content.thumbnail",
            "a.v1",
            "a..b.v1",
            "a.b.v1\x00",
            "a.b\ud800.v1",
            "a." + "b" * 200 + ".v1",
        ]
    ),
)

# -- JSON ------------------------------------------------------------------------------


class TooLongToPrint(int):
    """10**4300: an int Python refuses to turn into text (past 4300 digits), whose repr
    says so, for Hypothesis's reports of the examples that hold it."""

    def __repr__(self) -> str:
        return "10**4300"


#: Integers at and past the edges of int32, int64, doubles, and Python's 4300-digit
#: limit on turning an int into text.
HUGE_INTEGERS = [
    2**31 - 1,
    2**31,
    -(2**31),
    2**63 - 1,
    2**63,
    -(2**63) - 1,
    2**64,
    2**53 + 1,
    10**400,
    -(10**1000),
    10**4299,
    TooLongToPrint(10**4300),
]

ODD_FLOATS = [
    float("nan"),
    float("inf"),
    float("-inf"),
    -0.0,
    5e-324,
    1.7976931348623157e308,
    1e16,
    1e-7,
    0.1,
]

json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(HUGE_INTEGERS),
    st.floats(),
    st.sampled_from(ODD_FLOATS),
    odd_text,
)


class _Deep(list[Any]):
    """The outer list of a deep document, whose repr names it instead of printing every
    level (Hypothesis's report of a failing example would recurse past the limit)."""

    label = ""

    def __repr__(self) -> str:
        return self.label


class _DeepDict(dict[str, Any]):
    label = ""

    def __repr__(self) -> str:
        return self.label


def nested(depth: int, kind: str) -> Any:
    """A document ``depth`` levels deep: lists in lists, or dicts in dicts."""
    value: Any = 1
    for _ in range(depth - 1):
        value = [value] if kind == "list" else {"k": value}
    if depth == 0:
        return value
    outer: _Deep | _DeepDict = _Deep([value]) if kind == "list" else _DeepDict(k=value)
    outer.label = f"nested({depth}, {kind!r})"
    return outer


deep_json = st.builds(
    nested,
    st.one_of(st.sampled_from([100, 500, 900, 1000, 1500, 5000]), st.integers(0, 3000)),
    st.sampled_from(["list", "dict"]),
)

json_values = st.one_of(
    st.recursive(
        json_leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(odd_text, children, max_size=4),
        ),
        max_leaves=10,
    ),
    deep_json,
)

#: Payloads as a caller may pass them: JSON values, and Python values that are not JSON.
payloads = st.one_of(
    json_values,
    st.sampled_from([b"bytes", {1, 2}, datetime(2030, 1, 1, tzinfo=UTC), object(), (1, "a")]),
)


def as_read_back(value: Any) -> Any:
    """What a store gives back for a payload it accepted: JSON's own data (tuples are
    lists; ``None`` is the empty object, as ``start`` takes it)."""
    return {} if value is None else json.loads(json.dumps(value))


# -- times and durations ---------------------------------------------------------------

#: The first moment of the calendar, at the farthest offset east: before year 1 in UTC.
EARLIEST = datetime.min.replace(tzinfo=timezone(timedelta(hours=14)))
#: The last moment of the calendar, at the farthest offset west: after year 9999 in UTC.
LATEST = datetime.max.replace(tzinfo=timezone(timedelta(hours=-14)))

#: The farthest offsets there are: ``datetime.min`` at +14:00 is before year 1 in UTC.
zones = st.sampled_from(
    [
        UTC,
        timezone(timedelta(hours=14)),
        timezone(timedelta(hours=-14)),
        timezone(timedelta(minutes=1)),
    ]
)

aware_times = st.one_of(
    st.datetimes(timezones=zones),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2200, 1, 1), timezones=zones),
    st.builds(lambda zone: datetime.min.replace(tzinfo=zone), zones),
    st.builds(lambda zone: datetime.max.replace(tzinfo=zone), zones),
    st.builds(lambda n: datetime.now(UTC) + timedelta(seconds=n), st.integers(-1000, 1000)),
)

times = st.one_of(aware_times, st.datetimes(), st.sampled_from(["2030-01-01T00:00:00Z", 5]))

#: ISO 8601 texts for the API and the CLI, at the calendar's ends and without offsets.
time_texts = st.one_of(
    aware_times.map(datetime.isoformat),
    st.datetimes().map(datetime.isoformat),
    st.sampled_from(
        [
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59-14:00",
            "9999-12-31T23:59:59.999999+00:00",
            "2030-01-01T00:00:00Z",
            "2030-01-01",
            "tomorrow",
            "",
        ]
    ),
    odd_text,
)

duration_texts = st.one_of(
    st.from_regex(r"\A([0-9]{1,12}(\.[0-9]{1,3})?(ms|s|m|h|d|w)){1,3}\Z"),
    st.sampled_from(
        ["999999999d", "99999999999999w", "1e309s", "-5s", "0", "0s", "soon", "", "inf", "nan"]
    ),
    st.integers(0, 10**15).map(str),
)

durations = st.one_of(
    st.integers(-10, 10**13),
    st.sampled_from([0, 0.001, 1, 3155760000, 3162240001, 10**18, 2**63]),
    st.floats(),
    st.timedeltas(),
    duration_texts,
    st.sampled_from([True, [], "5m"]),
)

small_durations = st.one_of(
    st.floats(0, 0.2),
    st.sampled_from(["10ms", "50ms", timedelta(milliseconds=20), 0]),
)

# -- start options ---------------------------------------------------------------------

keys = st.one_of(odd_text, st.sampled_from([5, b"k"]))

integers_of_options = st.one_of(
    st.integers(-5, 10_005),
    st.sampled_from(HUGE_INTEGERS[:8]),
    st.sampled_from([0, 1, 10_000, 10_001, True, 1.5, "5"]),
)

debounces = st.one_of(
    st.tuples(keys, durations),
    st.fixed_dictionaries({"key": keys, "window": durations}, optional={"max_wait": durations}),
    st.sampled_from([("k",), {"key": "k"}, {"key": "k", "window": 1, "colour": 1}, "k"]),
)

start_options = st.fixed_dictionaries(
    {},
    optional={
        "idempotency_key": st.one_of(st.none(), keys),
        "priority": integers_of_options,
        "run_at": st.one_of(st.none(), times),
        "delay": st.one_of(st.none(), durations),
        "max_attempts": st.one_of(st.none(), integers_of_options),
        "deadline": st.one_of(st.none(), times, durations),
        "retention": st.one_of(st.none(), durations),
        "concurrency_key": st.one_of(st.none(), keys),
        "debounce": st.one_of(st.none(), debounces),
    },
)

# -- durable calls -----------------------------------------------------------------------

step_names = st.one_of(odd_text, st.sampled_from(["fetch", "a" * 200, "a" * 201, 5, None]))
event_names = st.one_of(
    st.from_regex(r"\A[A-Za-z0-9_.:\-]{1,20}\Z"),
    odd_text,
    st.sampled_from(["a" * 200, "a" * 201]),
)

#: ``RetryPolicy`` keywords (the policy is built in the test: building may be refused).
retry_policies = st.fixed_dictionaries(
    {},
    optional={
        "backoff": st.sampled_from(["fixed", "linear", "exponential", "quadratic", "cubic"]),
        "base": st.one_of(small_durations, durations),
        "factor": st.one_of(st.floats(0, 10), st.sampled_from([1.0, float("nan"), float("inf")])),
        "cap": st.one_of(small_durations, durations),
        "jitter": st.one_of(st.floats(0, 1), st.sampled_from([-0.1, 1.5, float("nan")])),
        "max_attempts": st.one_of(st.none(), st.integers(-1, 3), st.sampled_from([1.5, True])),
    },
)

MAX_KEY = names.MAX_KEY_LENGTH

# -- plausible inputs: valid more often than not, so that what is stored gets read back --

plain_text = st.text(
    alphabet=st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
    min_size=1,
    max_size=40,
)

plausible_durations = st.one_of(
    st.integers(0, 10**6),
    st.floats(0, 10**6),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3000)),
    st.from_regex(r"\A[0-9]{1,4}(ms|s|m|h|d|w)\Z"),
)

plausible_options = st.fixed_dictionaries(
    {},
    optional={
        "idempotency_key": st.one_of(st.none(), plain_text),
        "priority": st.integers(-(2**31) + 1, 2**31 - 1),
        "run_at": st.datetimes(
            min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=zones
        ),
        "max_attempts": st.integers(1, 10_000),
        "deadline": st.one_of(
            plausible_durations,
            st.datetimes(
                min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=zones
            ),
        ),
        "retention": plausible_durations,
        "concurrency_key": plain_text,
    },
)

plausible_payloads = st.one_of(
    st.recursive(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.sampled_from(HUGE_INTEGERS[:-1]),
            st.floats(allow_nan=False, allow_infinity=False),
            plain_text,
        ),
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(plain_text, children, max_size=4)
        ),
        max_leaves=12,
    ),
    st.builds(nested, st.integers(0, 500), st.sampled_from(["list", "dict"])),
)


def encoded(value: Any) -> str:
    """``value`` as the engine writes JSON (a match, a payload), or its typed error."""
    return payload_json.encode(value, what="match")


def mostly(
    valid: st.SearchStrategy[Any], odd: st.SearchStrategy[Any], *, one_in: int = 4
) -> st.SearchStrategy[Any]:
    """``odd`` once in ``one_in`` draws, else ``valid``: with several inputs each odd at
    random, nearly every call would be refused, and what is stored seldom checked."""
    return st.integers(1, one_in).flatmap(lambda n: odd if n == 1 else valid)
