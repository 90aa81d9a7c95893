"""Importing the user's module for ``worker`` and ``replay-check``, and saying what went wrong.

Three mistakes look alike from the outside and need different fixes: a file path given
where a module name goes (``./myapp.py``), a module Python cannot find (wrong working
directory or ``PYTHONPATH``), and a module that raises while it is imported (a bug, a
syntax error, a dependency that is not installed). The last one is the user's code, so
its traceback is shown, trimmed of the import machinery's frames.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from types import ModuleType
from typing import TextIO

from simpleworkflow import errors


def import_module(name: str, attribute: str, *, stderr: TextIO | None = None) -> ModuleType:
    """Import ``name`` (given as ``name:attribute``) as ``python -m`` would from the working
    directory, which need not be installed; a :class:`ConfigurationError` that says how to
    fix it if that fails."""
    _refuse_a_path(name, attribute)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except Exception as exc:
        if _not_found(name, exc):
            raise errors.ConfigurationError(
                f"cannot import module {name!r}: {type(exc).__name__}: {exc}; Python looked "
                f"in the working directory ({os.getcwd()}) and on PYTHONPATH: run the command "
                "from your project's directory, or add that directory to PYTHONPATH"
            ) from None
        (stderr or sys.stderr).write(_user_traceback(exc))
        raise errors.ConfigurationError(
            f"cannot import module {name!r}: {type(exc).__name__}: {_message(exc)} "
            f"({_where(exc)}); {_hint(exc)}"
        ) from None


def _refuse_a_path(name: str, attribute: str) -> None:
    """``myapp.py`` or ``./src/myapp.py``: a file where Python wants a dotted module name."""
    if not (name.endswith(".py") or "/" in name or os.sep in name):
        return
    module = name.removesuffix(".py").lstrip("./").replace(os.sep, "/").replace("/", ".")
    raise errors.ConfigurationError(
        f"{name!r} is a file path, but MODULE is a module name: write {module}:{attribute} (drop "
        "'.py' and the slashes), and run the command from the directory that holds the "
        "module's top package or file, or add that directory to PYTHONPATH"
    )


def _not_found(name: str, exc: Exception) -> bool:
    """Whether ``name`` itself (or a package on its path) is missing, as opposed to
    something the module imports."""
    missing = getattr(exc, "name", None)
    return (
        isinstance(exc, ModuleNotFoundError)
        and missing is not None
        and (name == missing or name.startswith(f"{missing}."))
    )


def _user_frames(exc: BaseException) -> traceback.TracebackException:
    trace = traceback.TracebackException.from_exception(exc)
    kept = [
        frame
        for frame in trace.stack
        if not frame.filename.startswith("<frozen")
        and frame.filename not in (__file__, importlib.__file__)
    ]
    trace.stack = traceback.StackSummary.from_list(kept)
    return trace


def _user_traceback(exc: BaseException) -> str:
    return "".join(_user_frames(exc).format())


def _message(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return exc.msg
    return " ".join(str(exc).split())


def _where(exc: BaseException) -> str:
    """``file, line N`` of the error: the line a syntax error is on, else the innermost
    frame of the traceback."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{_shown_path(exc.filename)}, line {exc.lineno}"
    stack = _user_frames(exc).stack
    if not stack:
        return "no traceback"
    return f"{_shown_path(stack[-1].filename)}, line {stack[-1].lineno}"


def _shown_path(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive, on Windows
        return path
    return path if relative.startswith("..") else relative


def _hint(exc: BaseException) -> str:
    if isinstance(exc, ModuleNotFoundError):
        return (
            f"the module imports {exc.name!r}, which this Python ({sys.executable}) cannot "
            "find: install it in this environment, or start the worker from the "
            "environment that has it"
        )
    return "the traceback above shows where; fix it and run the command again"
