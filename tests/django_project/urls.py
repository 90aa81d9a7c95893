"""The test project's one page, beside which the dashboard is mounted."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import path

from django_project.shop.models import Order


def orders(request: HttpRequest) -> HttpResponse:
    return HttpResponse(f"{Order.objects.count()} orders", content_type="text/plain")


urlpatterns = [path("orders/", orders)]
