"""``manage.py place_order ITEM``: an order saved and its run started in one
``transaction.atomic()``; prints the order's id and the run's."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

import simpleworkflow.django
from django_project.shop.models import Order
from django_project.shop.workflows import SHIP


class Command(BaseCommand):
    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("item")

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            order = Order.objects.create(item=options["item"])
            run = simpleworkflow.django.start(SHIP, {"order_id": order.pk})
        self.stdout.write(f"{order.pk} {run.id}")
