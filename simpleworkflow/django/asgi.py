"""The dashboard and the HTTP API under a prefix of a Django project's ASGI application.

Django's pages stay Django's; requests under the prefix go to
:func:`simpleworkflow.server.create_app` (the API at ``{prefix}/api/v1``, the dashboard at
``{prefix}/``), behind the API's tokens (:class:`~simpleworkflow.web.auth.Auth`: Django's
own login does not reach an ASGI application beside it). The lifespan goes to that
application alone: Django's handler takes none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from simpleworkflow import errors
from simpleworkflow.django import database
from simpleworkflow.web.auth import Auth


class Mounted:
    """An ASGI application: ``workflows`` under ``prefix``, ``django`` elsewhere."""

    def __init__(self, django: ASGIApp, workflows: ASGIApp, prefix: str) -> None:
        if not prefix.startswith("/") or prefix.endswith("/"):
            raise errors.InvalidArgument(
                f"prefix must start with '/' and not end with one, not {prefix!r}"
            )
        self.django = django
        self.workflows = workflows
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.workflows(scope, receive, send)
            return
        path: str = scope.get("path", "")
        if path == self.prefix or path.startswith(self.prefix + "/"):
            # The path stays whole; the prefix moves into root_path, where the dashboard's
            # links and FastAPI's routing find it.
            inner = {**scope, "root_path": scope.get("root_path", "") + self.prefix}
            await self.workflows(inner, receive, send)
            return
        await self.django(scope, receive, send)


def mount(
    django: ASGIApp,
    *,
    prefix: str = "/workflows",
    auth: Auth | None = None,
    allowed_hosts: Iterable[str] = (),
    **options: Any,
) -> Mounted:
    """``django`` (``get_asgi_application()``) with the workflows' dashboard and API under
    ``prefix``, on the project's store; ``auth`` defaults to the environment's tokens
    (``$SIMPLEWORKFLOW_API_TOKEN``...); ``options`` are ``create_app``'s."""
    from simpleworkflow.server import create_app  # the server extra

    store = database.configured()
    app = create_app(
        database_url=store.url,
        schema=store.schema,
        auth=auth if auth is not None else Auth.from_env(),
        allowed_hosts=allowed_hosts,
        **options,
    )
    return Mounted(django, app, prefix)
