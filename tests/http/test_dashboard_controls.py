"""The dashboard's schedules and limits pages on both stores, through the ASGI interface:
they show what the store holds, the schedule forms pause, resume and run now, and the
read-only token sees no form and is refused."""

from __future__ import annotations

import re
import time
import uuid

from api_helpers import READ_TOKEN, TOKEN
from conftest import Store
from test_dashboard import TYPE, Dash, texts

from simpleworkflow import Client
from simpleworkflow.server import Auth

NIGHTLY = "shop.nightly"


def row(page: str, attribute: str, value: str) -> str:
    found = re.search(rf'<tr {attribute}="{re.escape(value)}">(.*?)</tr>', page, re.S)
    assert found, page[-3000:]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(1))).strip()


def test_the_schedules_page_lists_each_schedule_and_pauses_and_resumes_it(
    store: Store, client: Client
) -> None:
    client.schedules.create(NIGHTLY, TYPE, cron="0 3 * * *", tz="Europe/Paris")
    dash = Dash(store)
    try:
        page = dash.get("/schedules")
        assert page.status_code == 200 and 'aria-current="page">Schedules' in page.text
        shown = row(page.text, "data-schedule", NIGHTLY)
        assert TYPE in shown and "0 3 * * *" in shown and "Europe/Paris" in shown
        assert "active" in shown
        planned = client.schedules.get(NIGHTLY).next_tick_at
        assert planned is not None and planned.strftime("%Y-%m-%d %H:%M:%S UTC") in shown
        paused = dash.act(f"/schedules/{NIGHTLY}/pause")
        assert paused.status_code == 303
        assert client.schedules.get(NIGHTLY).paused
        after = dash.get(paused.headers["location"]).text
        assert texts(after, "ok") == [
            "The schedule was paused: it starts no run until it is resumed."
        ]
        assert "paused" in row(after, "data-schedule", NIGHTLY)
        assert dash.act(f"/schedules/{NIGHTLY}/resume").status_code == 303
        assert not client.schedules.get(NIGHTLY).paused
        missing = dash.act("/schedules/shop.nothing/pause")
        assert missing.status_code == 404 and "shop.nothing" in missing.text
        forged = dash.post(f"/schedules/{NIGHTLY}/pause", data={"csrf_token": "wrong"})
        assert forged.status_code == 403 and not client.schedules.get(NIGHTLY).paused
    finally:
        dash.close()


def test_run_now_starts_one_run_and_names_it(store: Store, client: Client) -> None:
    client.schedules.create(NIGHTLY, TYPE, cron="0 3 * * *", payload={"shop": "eu"})
    client.schedules.pause(NIGHTLY)  # a paused schedule may still be run now
    planned = client.schedules.get(NIGHTLY).next_tick_at
    dash = Dash(store)
    try:
        page = dash.get("/schedules").text
        assert f'action="/schedules/{NIGHTLY}/trigger"' in page and "Run now" in page
        for _ in range(5):  # a double click: two within one second start one run
            time.sleep(1 - time.time() % 1)
            first, second = (dash.act(f"/schedules/{NIGHTLY}/trigger") for _ in range(2))
            if "already" in second.headers["location"]:
                break
        assert first.status_code == second.status_code == 303
        runs = client.list(type_prefix=TYPE).runs
        assert len(runs) == 1
        run = runs[0]
        assert run.payload["shop"] == "eu" and run.payload["triggered"] is True
        after = dash.get(first.headers["location"]).text
        assert texts(after, "ok") == [
            f"The schedule started a run now; its next tick is unchanged. The run: {run.id}."
        ]
        assert f'href="/runs/{run.id}"' in after
        again = texts(dash.get(second.headers["location"]).text, "ok")
        assert again[0].startswith("The schedule was started by hand within this second")
        assert run.id in again[0]
        found = client.schedules.get(NIGHTLY)
        assert found.paused and found.next_tick_at == planned
        forged = dash.get(f"/schedules?done=schedule-triggered&run=<b>{run.id}</b>").text
        assert texts(forged, "ok") == [
            "The schedule started a run now; its next tick is unchanged."
        ]
        missing = dash.act("/schedules/shop.nothing/trigger")
        assert missing.status_code == 404 and "shop.nothing" in missing.text
        refused = dash.post(f"/schedules/{NIGHTLY}/trigger", data={"csrf_token": "wrong"})
        assert refused.status_code == 403 and len(client.list(type_prefix=TYPE).runs) == 1
    finally:
        dash.close()


def test_the_read_only_token_sees_schedules_and_limits_and_cannot_pause(
    store: Store, client: Client
) -> None:
    client.schedules.create(NIGHTLY, TYPE, cron="0 3 * * *")
    dash = Dash(store, auth=Auth(token=TOKEN, read_token=READ_TOKEN))
    try:
        assert dash.get("/schedules").status_code == 303  # a login first
        dash.log_in(READ_TOKEN)
        for path in ("/schedules", "/limits"):
            page = dash.get(path)
            assert page.status_code == 200 and "read-only" in page.text
            assert '<form method="post" action="/schedules' not in page.text
        refused = dash.post(f"/schedules/{NIGHTLY}/pause", data={"csrf_token": dash.csrf()})
        assert refused.status_code == 403 and "may only read" in refused.text
        assert not client.schedules.get(NIGHTLY).paused
        refused = dash.post(f"/schedules/{NIGHTLY}/trigger", data={"csrf_token": dash.csrf()})
        assert refused.status_code == 403 and "may only read" in refused.text
        assert store.count("workflow_run") == 0
    finally:
        dash.close()


def test_the_limits_page_shows_each_limit_and_what_is_in_use_now(
    store: Store, client: Client
) -> None:
    client.admin.set_runtime(TYPE, "python")
    client.admin.set_concurrency(TYPE, 4, per_key=1)
    client.admin.set_rate_limit("partner-api", "10/1m")
    client.admin.limit_rate(TYPE, "partner-api")
    leased = [client.start(TYPE).id for _ in range(2)]
    for run_id in leased:
        store.sql(
            "update workflow_run set status = 'leased', leased_by = 'w', lease_token = ?, "
            "lease_until = '2999-01-01 00:00:00' where id = ?",
            str(uuid.uuid4()),
            run_id,
        )
    throttled = client.start(TYPE).id
    store.sql(
        "update workflow_run set waiting_for = ? where id = ?",
        '{"kind": "throttle", "rate_limit": "partner-api", "until": "2030-01-01"}',
        throttled,
    )
    dash = Dash(store)
    try:
        page = dash.get("/limits").text
        assert 'aria-current="page">Limits' in page
        assert row(page, "data-type", TYPE) == f"{TYPE} 2 of 4 4 1 partner-api 1"
        rate = row(page, "data-rate", "partner-api")
        assert rate == f"partner-api 10 claims per 60 s for all its types together {TYPE} 1"
    finally:
        dash.close()


def test_with_no_schedule_or_limit_the_pages_say_how_to_make_one(store: Store) -> None:
    dash = Dash(store)
    try:
        assert "No schedule yet" in dash.get("/schedules").text
        page = dash.get("/limits").text
        assert "No type has a concurrency or rate limit" in page and "No rate limit" in page
    finally:
        dash.close()
