"""The `simpleworkflow runs` command (placeholder, being written)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("runs", help="(not written yet)")
    parser.set_defaults(handler=lambda args: 1)
