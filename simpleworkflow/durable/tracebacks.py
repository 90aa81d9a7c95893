"""A failed attempt's error as people read it: the user's exception first, the library's
frames folded.

Python's own text of a step that gave up starts in the worker's ``execution.py`` and ends
in ``steps.py``; the user's exception and the line that raised it are what matter. The
text made here (stored as the run's ``last_error`` and in its ``failed`` and
``step_failed`` events, so every surface shows the same) starts with a headline, the
exception raised (or the user's that a step's ``StepFailed`` stands for), then the chain
as Python orders it, causes first, each frame of simpleworkflow or of the
standard library's machinery (asyncio, threads) folded into a line that counts them. It
still ends with the exception raised, as a traceback does. When no frame at all is the
user's (a failure of the library itself), nothing is folded.
"""

from __future__ import annotations

import os
import sysconfig
import traceback

_LIBRARY = (
    os.path.dirname(os.path.dirname(__file__)) + os.sep,  # the package, not this folder
    os.path.join(sysconfig.get_paths()["stdlib"], ""),
)
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"
#: Exceptions of a chain shown at most (a cycle or a very long chain is cut).
_MAX_CHAIN = 8


def describe(exc: BaseException, limit: int | None = None) -> str:
    """``exc`` with its chain of causes, headline first; at most ``limit`` characters
    (the headline and the end kept, the middle cut)."""
    trace = traceback.TracebackException.from_exception(exc)
    chain = _chain(trace)
    fold = any(not _library(frame.filename) for one in chain for frame in one.stack)
    headline = "".join(_headline(chain).format_exception_only()).strip().splitlines()[0]
    parts: list[str] = []
    for index, one in enumerate(chain):
        if index:
            parts.append(_CAUSE if one.__cause__ is chain[index - 1] else _CONTEXT)
        parts.extend(_format(one, fold))
    text = f"{headline}\n{''.join(parts)}"
    if limit is not None and len(text) > limit:
        keep = max(limit - len(headline) - 20, 0)
        text = f"{headline}\n[... cut ...]\n{text[len(text) - keep :]}"
    return text


def _chain(trace: traceback.TracebackException) -> list[traceback.TracebackException]:
    """The exceptions of the chain, the first cause first and ``trace`` last."""
    chain = [trace]
    while len(chain) < _MAX_CHAIN:
        one = chain[-1]
        earlier = one.__cause__
        if earlier is None and not one.__suppress_context__:
            earlier = one.__context__
        if earlier is None or any(earlier is seen for seen in chain):
            break
        chain.append(earlier)
    return chain[::-1]


def _headline(chain: list[traceback.TracebackException]) -> traceback.TracebackException:
    """The exception raised, unless the library raised it for another (a step's
    ``StepFailed`` for the user's error): then that one."""
    index = len(chain) - 1
    while index and _wraps(chain[index]):
        index -= 1
    return chain[index]


def _wraps(trace: traceback.TracebackException) -> bool:
    kind = trace.exc_type
    raised_by_library = not trace.stack or _library(trace.stack[-1].filename)
    return kind is not None and kind.__module__.startswith("simpleworkflow") and raised_by_library


def _format(trace: traceback.TracebackException, fold: bool) -> list[str]:
    lines: list[str] = []
    if trace.stack:
        lines.append("Traceback (most recent call last):\n")
        hidden = 0
        for frame in trace.stack:
            if fold and _library(frame.filename):
                hidden += 1
                continue
            if hidden:
                lines.append(_left_out(hidden))
                hidden = 0
            lines.extend(traceback.StackSummary.from_list([frame]).format())
        if hidden:
            lines.append(_left_out(hidden))
    lines.extend(trace.format_exception_only())
    return lines


def _library(filename: str) -> bool:
    return filename.startswith(_LIBRARY)


def _left_out(count: int) -> str:
    return f"  [{count} library frame{'s' if count != 1 else ''} left out]\n"
