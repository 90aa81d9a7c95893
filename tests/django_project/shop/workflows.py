"""The shop's workflow: it ships an order, writing through the ORM from the worker."""

from __future__ import annotations

from typing import Any

from simpleworkflow import App, Context

SHIP = "shop.order.ship.v1"

app = App()


@app.workflow(SHIP)
def ship(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    from django_project.shop.models import Order

    def mark_shipped() -> int:
        return int(Order.objects.filter(pk=payload["order_id"]).update(status="shipped"))

    shipped = ctx.step("mark-shipped", mark_shipped)
    return {"order_id": payload["order_id"], "shipped": shipped}
