"""The app of the flow-control process tests: ``simpleworkflow worker limits_app:app``
with ``tests/`` on the path. Its handlers only take a little time; what the tests check
is read from the audit events, not from anything the workers count."""

from __future__ import annotations

import asyncio
from typing import Any

from simpleworkflow import Context
from simpleworkflow.app import App

app = App()
KEYED = "limits.keyed.v1"


@app.workflow(KEYED)
async def keyed(payload: dict[str, Any]) -> dict[str, Any]:
    # Long enough that a worker with both slots busy leaves the third key's run to
    # another process, however fast this one claims again on a loaded machine.
    await asyncio.sleep(0.15)
    return {}


RATED = "limits.rated.v1"


@app.workflow(RATED)
async def rated(payload: dict[str, Any]) -> dict[str, Any]:
    return {}


STEPPED = "limits.stepped.v1"


@app.workflow(STEPPED)
async def stepped(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    await ctx.rate_limit("partner-api")  # the limit RATED's claims obey
    return {}
