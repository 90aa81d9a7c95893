"""An order saga: reserve stock, charge the card, ship; undo what was done if shipping fails.

There is no transaction across an inventory service, a payment provider and a carrier.
A saga replaces it with steps and compensations: each step that succeeded registers the
function that undoes it (``ctx.on_rollback``), and when the run fails for good the
compensations run in reverse order. Each compensation is a journaled step too
(``rollback/<name>``), so a crash halfway through the undoing resumes it instead of
refunding twice.

How the run ends, by design:

- shipped: the run **succeeds** with ``{"status": "shipped", ...}``;
- shipping failed: the compensations run (refund, then release), and the run **fails**
  with the shipping error; its ``failed`` event lists each compensation's outcome
  (``data["rollback"]``). The order was not placed, and ``failed`` is what a caller,
  an alert and ``simpleworkflow runs list --status failed`` see;
- a compensation itself failed for good: the others still run, and the run fails with
  the shipping error plus a line naming that compensation, for a person to look at.

Run it (a worker in this process, on a throw-away SQLite file)::

    python examples/order_saga.py                      # or pass a database URL
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from simpleworkflow import App, AsyncClient, Context, Event, RetryPolicy, Run, errors

PLACE_ORDER = "shop.order.place.v1"

app = App()


class Inventory:
    def __init__(self) -> None:
        self.reserved: dict[str, list[str]] = {}

    def reserve(self, order_id: str, items: list[str]) -> dict[str, str]:
        self.reserved[order_id] = items
        return {"reservation_id": f"res_{order_id}"}

    def release(self, order_id: str) -> None:
        self.reserved.pop(order_id, None)  # idempotent: a replayed release is harmless


class Payments:
    """Its refund endpoint times out on the first call for each order, as they do."""

    def __init__(self) -> None:
        self.charged: dict[str, int] = {}
        self.refunded: dict[str, int] = {}
        self._refunds_tried: set[str] = set()

    def charge(self, order_id: str, amount: int) -> dict[str, str]:
        self.charged[order_id] = amount
        return {"charge_id": f"ch_{order_id}"}

    def refund(self, order_id: str) -> None:
        if order_id not in self._refunds_tried:
            self._refunds_tried.add(order_id)
            raise TimeoutError(f"refund of {order_id} timed out")
        self.refunded[order_id] = self.charged[order_id]


SERVED_COUNTRIES = frozenset({"DE", "FR", "NL"})


class Carrier:
    def ship(self, order_id: str, country: str) -> dict[str, str]:
        if country not in SERVED_COUNTRIES:
            # No retry can change this: a PermanentError is not retried, so the step
            # fails at once, and StepFailed fails the run without a retry.
            raise errors.PermanentError(f"no carrier delivers to {country}")
        return {"tracking": f"trk_{order_id}"}


inventory, payments, carrier = Inventory(), Payments(), Carrier()

# [start saga]
# Card networks time out now and then: retry the charge a few times, seconds apart.
CHARGE_RETRY = RetryPolicy(backoff="exponential", base="2s", cap="1m", max_attempts=4)


@app.workflow(PLACE_ORDER)
def place_order(order: dict[str, Any], ctx: Context) -> dict[str, Any]:
    # A plain ``def`` body runs in a worker thread; ctx.step returns the value directly.
    order_id = order["order_id"]
    ctx.step("reserve-stock", inventory.reserve, order_id, order["items"])
    # From here on, a run that fails for good releases the stock. Compensations run in
    # reverse order of registration, each once, as a step with the default retry policy
    # (3 attempts, 1 s then 2 s apart) unless given ``retry=``.
    ctx.on_rollback("release-stock", inventory.release, order_id)
    ctx.step("charge-card", payments.charge, order_id, order["amount"], retry=CHARGE_RETRY)
    ctx.on_rollback("refund-card", payments.refund, order_id)
    # A PermanentError from the carrier fails the step, and then the run, at once.
    shipment = ctx.step("ship", carrier.ship, order_id, order["country"])
    return {"status": "shipped", "tracking": shipment["tracking"]}


# [end saga]


async def place_orders(
    database_url: str, schema: str | None = None, *, orders: list[dict[str, Any]]
) -> list[tuple[Run, list[Event]]]:
    """Start the orders with a worker in this process; each run with its audit trail."""
    worker = app.poller(
        database_url=database_url, schema=schema, worker_id="saga-example", poll_interval=0.2
    )
    async with AsyncClient(database_url, schema=schema) as client:
        await client.migrate()
        working = asyncio.create_task(worker.run_async())
        try:
            started = [
                await client.start(PLACE_ORDER, order, idempotency_key=f"order:{order['order_id']}")
                for order in orders
            ]
            finished = [await client.wait(run.id, timeout=60) for run in started]
        finally:
            worker.stop()
            await working
        return [(run, await client.events(run.id)) for run in finished]


def print_trail(run: Run, events: list[Event]) -> None:
    """The audit trail, one event a line, with the step it concerns."""
    failed = (run.last_error or "").strip().splitlines()[-1:]
    outcome = run.result if run.status.value == "succeeded" else " ".join(failed)
    print(f"run {run.id} {run.status.value}: {outcome}")
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        error = data.get("error", {}).get("message", "")
        print(f"  {event.event_type:<16} {data.get('step', ''):<22} {error}".rstrip())


def main(database_url: str | None = None) -> None:
    orders = [
        {"order_id": "o_1001", "items": ["mug"], "amount": 1200, "country": "NL"},
        {"order_id": "o_1002", "items": ["lamp"], "amount": 4900, "country": "AQ"},
    ]
    with tempfile.TemporaryDirectory() as scratch:
        url = database_url or f"sqlite:///{Path(scratch) / 'orders.db'}"
        for run, events in asyncio.run(place_orders(url, orders=orders)):
            print_trail(run, events)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
