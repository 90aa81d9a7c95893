"""Counts in messages for people: ``1 run``, ``2 runs``, never ``1 runs``."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and the noun that agrees with it (``nouns`` when adding an s will not do)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"
