"""Apps for ``tests/stores/test_cli_durable.py``: one workflow as deployed, and changed three ways.

``replay-check`` imports them by ``MODULE:APP`` like any user's code; the store comes from
the command line.
"""

from __future__ import annotations

from typing import Any

from simpleworkflow import App, Context

SIGNUP = "test.cli.signup.v1"


def _create(email: str) -> dict[str, str]:
    return {"account": f"acct:{email}"}


def _register(
    app: App, *, step: str = "create-account", patch: bool = False, **options: Any
) -> None:
    @app.workflow(SIGNUP, **options)
    async def signup(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
        name = step
        if patch:  # the rename behind a patch: old runs keep the old name
            name = "open-account" if await ctx.patched("open-account") else "create-account"
        account = await ctx.step(name, _create, payload["email"])
        confirmed = await ctx.wait_for_event("confirmed", event="confirm", timeout="1h")
        return {**account, "confirmed": confirmed}


#: The code the runs started on.
deployed = App()
_register(deployed)

#: The same steps, other code around them: safe to deploy.
reworded = App()
_register(reworded, timeout="10m")

#: A step renamed under running workflows: their journals no longer match.
renamed = App()
_register(renamed, step="open-account")

#: A new version that does not declare the old one compatible: old runs are left alone.
bumped = App()
_register(bumped, version="2")

#: The same rename behind a patch: old runs keep the old step, so it is safe to deploy.
patched = App()
_register(patched, patch=True)
