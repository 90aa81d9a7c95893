"""Settings of the test project: ``DJANGO_SETTINGS_MODULE=django_project.settings``."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


def database(url: str) -> dict[str, Any]:
    """A ``DATABASES`` entry for a store's URL (a SQLite file, or Postgres)."""
    if url.startswith("sqlite:"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url.removeprefix("sqlite:///")}
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": query.get("host", [parts.hostname or ""])[0],
        "PORT": str(parts.port or ""),
    }


DATABASES = {"default": database(os.environ["SHOP_DATABASE_URL"])}
if os.environ.get("SHOP_OTHER_DATABASE_URL"):
    DATABASES["other"] = database(os.environ["SHOP_OTHER_DATABASE_URL"])

SECRET_KEY = "a key for the tests only, never for a site"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = ["simpleworkflow.django", "django_project.shop"]
ROOT_URLCONF = "django_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
SIMPLEWORKFLOW = {"APP": "django_project.shop.workflows:app"}
