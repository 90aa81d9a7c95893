"""The ``simpleworkflow`` command.

Each sub-command lives in its own module with a ``register(subparsers)`` function that
adds its parser and sets ``handler`` (a function of the parsed arguments returning an
exit code). Errors of the project's tree become one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from simpleworkflow import config, errors


def _command_modules() -> list[ModuleType]:
    from simpleworkflow.cli import migrate, runs, start

    return [migrate, start, runs]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="simpleworkflow",
        description="A durable workflow system on Postgres or SQLite.",
    )
    parser.add_argument(
        "--database-url",
        "-d",
        default=None,
        help=f"postgresql://... or sqlite:///file.db (default: ${config.ENV_VAR}, "
        f"else {config.DEFAULT_URL})",
    )
    parser.add_argument(
        "--schema",
        default="workflow",
        help="Postgres schema holding the tables (default: workflow)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
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
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
