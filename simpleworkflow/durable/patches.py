"""Code changes under runs in flight: ``ctx.patched("id")`` tells old runs from new ones.

A deploy that changes a workflow's steps would make the runs already under way diverge
(their journal holds the old steps). Guarding the change with a patch keeps both paths
in the code for as long as old runs need the old one::

    if await ctx.patched("bill-before-ship"):
        await ctx.step("bill", ...)   # new code
    await ctx.step("ship", ...)

The first time a run meets a patch it is decided, and journaled as a ``patch`` entry
(``@patch:<id>``, ``{"patched": true|false}``): ``False`` when the run's journal still
holds entries the replay has not met (the run went past this point on code without the
patch), ``True`` otherwise (a new run, or one that had not got this far). Every later
replay, and every later call with the same id in the run, reads the journaled decision.

A patch marker never has to be met again (``replay.Replay`` leaves them out of the
entries a replay must meet): once no unfinished run takes the old side (``replay-check``
lists the runs that do), the ``if`` can be replaced by its new side alone, and runs that
journaled the patch replay without it.
"""

from __future__ import annotations

import asyncio

from simpleworkflow import errors, names
from simpleworkflow.durable.attempt import AttemptState
from simpleworkflow.durable.kinds import JournalKind
from simpleworkflow.models import JournalEntry

#: A patch's journal entry is named ``@patch:<id>``.
PREFIX = "@patch:"


def marker(patch_id: object) -> str:
    """The journal name of patch ``patch_id``; refuses an id that cannot name one."""
    longest = names.MAX_STEP_NAME - len(PREFIX)
    if not isinstance(patch_id, str) or not patch_id or len(patch_id) > longest:
        raise errors.InvalidArgument(
            f"patch id must be text of 1 to {longest} characters, not {patch_id!r:.80}"
        )
    return names.validate_step_name(PREFIX + patch_id)


def patch_id(name: str) -> str:
    """The id of the patch journaled as ``name``."""
    return name.removeprefix(PREFIX)


def decision(entry: JournalEntry) -> bool:
    """What a journaled patch entry decided."""
    return isinstance(entry.output, dict) and entry.output.get("patched") is True


async def patched(state: AttemptState, name: str) -> bool:
    """Patch ``name``'s decision for this run: journaled, or made now and journaled."""
    if state.is_cancelled():
        raise errors.Cancelled(state.stop_reason or "stop requested")
    durable = state.durable
    replay = await durable.load()
    entry = replay.lookup(name, JournalKind.PATCH)
    if entry is None:
        # Parallel branches started in the same tick meet their journaled steps first,
        # as before a new step is judged (``Durable.begin``).
        for _ in range(3):
            await asyncio.sleep(0)
        entry = replay.lookup(name, JournalKind.PATCH)
    if entry is not None:
        return decision(entry)
    new = not replay.unmet  # journaled steps still ahead: the run went past on old code
    await durable.journal(name, JournalKind.PATCH, {"patched": new}, events=[])
    return new
