"""``python manage.py simpleworkflow_worker [MODULE:APP]``: ``simpleworkflow worker``
inside the Django project, on its store (Django's database unless
``settings.SIMPLEWORKFLOW`` says otherwise), with Django set up for the handlers' ORM."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from simpleworkflow import errors
from simpleworkflow.cli import worker
from simpleworkflow.django import database


class Command(BaseCommand):
    help = (
        "Run a simpleworkflow worker for MODULE:APP (default: SIMPLEWORKFLOW['APP']) on "
        "the project's store until SIGTERM or Ctrl-C; the options of `simpleworkflow "
        "worker`. The first signal stops claiming and lets running handlers finish "
        "within --grace."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "target",
            nargs="?",
            metavar="MODULE:APP",
            help="e.g. myproject.workflows:app (default: settings.SIMPLEWORKFLOW['APP'])",
        )
        worker.add_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            store = database.configured()
            target = options.get("target") or store.app
            if not target:
                raise errors.ConfigurationError(
                    "name the app: manage.py simpleworkflow_worker myproject.workflows:app, "
                    "or set settings.SIMPLEWORKFLOW['APP']"
                )
            given = argparse.Namespace(**options)
            given.target = target
            given.database_url = options.get("database_url") or store.url
            given.schema = options.get("schema") or store.schema
            code = worker.run(given)
        except errors.SimpleWorkflowError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        if code:
            raise CommandError("the worker failed (see its log)", returncode=code)
