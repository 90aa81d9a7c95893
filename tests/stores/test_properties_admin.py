"""Properties of the operator's and the publisher's inputs, on both stores, over generated
values (tests/property_strategies.py): subscriptions, publishes, cron schedules and rate
limits are either refused with a typed error and nothing stored, or stored and read back
as given."""

from __future__ import annotations

from typing import Any

import property_strategies as gen
from conftest import Store
from hypothesis import event, given
from hypothesis import strategies as st
from test_properties_start import same_json

from simpleworkflow import Client, errors

TYPE = "prop.admin.v1"

topics = gen.mostly(
    st.from_regex(r"\A[a-z0-9][a-z0-9_-]{0,8}(\.[a-z0-9_-]{1,8}){0,3}\Z"), gen.odd_text
)
patterns = gen.mostly(
    st.sampled_from(["#", "prop.*", "prop.#", "prop.created", "*.created"]),
    st.one_of(gen.odd_text, st.sampled_from(["prop.#.x", "prop.*.#", "pr*p", "#.prop"])),
)


@gen.bounded(25)
@given(
    pattern=patterns,
    type_name=gen.mostly(st.just(TYPE), gen.type_names),
    priority=gen.mostly(st.just(100), gen.integers_of_options),
    max_attempts=gen.mostly(st.none(), gen.integers_of_options),
)
def test_a_subscription_is_refused_whole_or_stored_as_given(
    store: Store, client: Client, pattern: Any, type_name: Any, priority: Any, max_attempts: Any
) -> None:
    before = store.count("workflow_subscription")
    try:
        made = client.admin.subscribe(
            pattern, type_name, priority=priority, max_attempts=max_attempts
        )
    except errors.InvalidInput:
        assert store.count("workflow_subscription") == before
        event("refused")
        return
    event("stored")
    assert (made.pattern, made.workflow_type, made.priority, made.max_attempts) == (
        pattern,
        type_name,
        priority,
        max_attempts,
    )
    assert made in client.admin.subscriptions()


@gen.bounded(25)
@given(
    topic=topics,
    payload=gen.mostly(gen.plausible_payloads, gen.payloads),
    event_id=gen.mostly(st.none(), st.one_of(gen.odd_text, st.just(5))),
)
def test_a_publish_is_refused_whole_or_starts_runs_of_the_payload(
    store: Store, client: Client, topic: Any, payload: Any, event_id: Any
) -> None:
    if store.count("workflow_subscription") == 0:
        client.admin.subscribe("#", TYPE)
    before = store.count()
    try:
        published = client.publish(topic, payload, event_id=event_id)
    except errors.InvalidInput:
        assert store.count() == before
        event("refused")
        return
    event("published")
    assert published.topic == topic
    for run in published.runs:
        stored = client.get(run.id)
        if run.created:
            assert same_json(stored.payload, gen.as_read_back(payload))


crons = gen.mostly(
    st.sampled_from(["* * * * *", "0 9 * * 1-5", "*/5 * * * * *", "0 0 29 2 *", "0 0 31 4 *"]),
    st.one_of(gen.odd_text, st.sampled_from(["61 * * * *", "* * * *", "@yearly", "0 0 30 2 *"])),
)
zones = gen.mostly(
    st.sampled_from(["UTC", "Europe/Paris", "Pacific/Kiritimati", "America/St_Johns"]),
    st.one_of(gen.odd_text, st.sampled_from(["Mars/Olympus", "../../etc/passwd", "UTC\x00"])),
)


@gen.bounded(30)
@given(
    name=gen.mostly(
        st.from_regex(r"\A[a-z][a-z0-9_-]{0,10}(\.[a-z0-9_-]{1,8}){0,2}\Z"),
        gen.odd_text,
        one_in=8,
    ),
    cron=crons,
    tz=zones,
    payload=gen.mostly(
        st.dictionaries(gen.plain_text, gen.plausible_payloads, max_size=3),
        gen.payloads,
        one_in=8,
    ),
    missed=gen.mostly(st.sampled_from(["skip", "once", "all"]), gen.odd_text, one_in=8),
    priority=gen.mostly(st.just(100), gen.integers_of_options, one_in=8),
    max_attempts=gen.mostly(st.none(), gen.integers_of_options, one_in=8),
)
def test_a_schedule_is_refused_whole_or_stored_as_given(
    store: Store,
    client: Client,
    name: Any,
    cron: Any,
    tz: Any,
    payload: Any,
    missed: Any,
    priority: Any,
    max_attempts: Any,
) -> None:
    before = store.count("workflow_schedule")
    try:
        made = client.schedules.create(
            name,
            TYPE,
            cron=cron,
            tz=tz,
            payload=payload,
            missed=missed,
            priority=priority,
            max_attempts=max_attempts,
        )
    except errors.InvalidInput:
        assert store.count("workflow_schedule") == before
        event("refused")
        return
    event("stored")
    read = client.schedules.get(name)
    assert (read.name, read.cron, read.timezone, read.missed) == (name, cron, tz, missed)
    assert (read.priority, read.max_attempts) == (priority, max_attempts)
    assert same_json(read.payload, gen.as_read_back(payload))
    assert same_json(made.payload, read.payload)


rates = gen.mostly(
    st.builds(lambda n, unit: f"{n}/{unit}", st.integers(1, 10_000), st.sampled_from("smhd")),
    st.one_of(
        gen.odd_text,
        st.tuples(gen.integers_of_options, gen.durations),
        st.sampled_from(["0/s", "-1/m", "1/0s", "1/999999999d", "99999999999999999999/s"]),
    ),
)


@gen.bounded(30)
@given(
    name=gen.mostly(st.from_regex(r"\A[a-z][a-z0-9_.-]{0,20}\Z"), gen.odd_text),
    rate=rates,
    per_key=st.booleans(),
)
def test_a_rate_limit_is_refused_whole_or_stored_as_given(
    store: Store, client: Client, name: Any, rate: Any, per_key: bool
) -> None:
    before = store.count("workflow_rate_limit")
    try:
        made = client.admin.set_rate_limit(name, rate, per_key=per_key)
    except errors.InvalidInput:
        assert store.count("workflow_rate_limit") == before
        event("refused")
        return
    event("stored")
    assert made.name == name and made.per_key == per_key
    assert made in client.admin.rate_limits()
