"""An order, the business row a run starts with."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    status = models.CharField(max_length=20, default="new")

    class Meta:
        app_label = "shop"
