"""The ``simpleworkflow`` command.

Each sub-command lives in its own module with a ``register(subparsers)`` function that
adds its parser and sets ``handler`` (a function of the parsed arguments returning an
exit code). Errors of the project's tree become one line on stderr and exit code 2, so
that a script sees a clear message and never a traceback for input it got wrong. A
command given without its sub-command (``simpleworkflow``, ``simpleworkflow runs``)
prints its help and exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from types import ModuleType

import simpleworkflow
from simpleworkflow import errors
from simpleworkflow.cli import _common


def _command_modules() -> list[ModuleType]:
    """The sub-command modules, in the order ``--help`` lists them."""
    from simpleworkflow.cli import (
        demo,
        insight,
        limits,
        migrate,
        payload_index,
        registry,
        replaycheck,
        runs,
        schedules,
        serve,
        start,
        stats,
        sweep,
        topics,
        worker,
    )

    return [
        demo,
        migrate,
        start,
        runs,
        stats,
        insight,
        worker,
        serve,
        replaycheck,
        registry,
        limits,
        topics,
        schedules,
        sweep,
        payload_index,
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simpleworkflow",
        description="A durable workflow system on Postgres or SQLite. Start with "
        "`simpleworkflow demo`; `simpleworkflow COMMAND --help` tells more.",
    )
    parser.add_argument(
        "--version", action="version", version=f"simpleworkflow {simpleworkflow.__version__}"
    )
    _common.add_store_options(parser, top_level=True)
    subparsers = _common.add_commands(parser, dest="command", metavar="COMMAND")
    for module in _command_modules():
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except errors.SimpleWorkflowError as exc:
        print(f"simpleworkflow: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`simpleworkflow runs list | head`): not an error of ours.
        # Point stdout at /dev/null so the interpreter's final flush does not complain.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
