"""docs/api.md's curl samples show what the API answers now: they run, top to bottom,
against a real ``simpleworkflow serve`` on a fresh SQLite file, and their output is
compared as tests/test_docs.py compares the CLI's (ids and times normalised).

The samples name ``http://localhost:8000``; the server here listens on a free port, which
stands for it. tests/test_docs.py skips these blocks (they say so in their doc-test
comment), since they need the server. ``SIMPLEWORKFLOW_WRITE_DOCS=1`` rewrites them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from api_helpers import served
from conftest import Store
from test_docs import ROOT, WRITE, Block, Shell, Step, _mismatch, _write, blocks

DOC = ROOT / "docs" / "api.md"
SHOWN_BASE = "localhost:8000"
MARK = "skip: run against a server by tests/test_api_docs.py"


class ApiShell(Shell):
    """A page's shell whose ``localhost:8000`` is the test's server."""

    def __init__(self, directory: Path, make_database: Callable[[], str], base: str) -> None:
        super().__init__(directory, make_database)
        self.base = base.removeprefix("http://")

    def _real(self, command: str) -> str:
        return super()._real(command).replace(SHOWN_BASE, self.base)

    def shown_output(self, actual: list[str]) -> list[str]:
        return [line.replace(self.base, SHOWN_BASE) for line in super().shown_output(actual)]


def served_blocks() -> list[Block]:
    return [b for b in blocks(DOC) if b.lang == "console" and MARK in b.directives]


def test_the_api_samples_show_what_the_server_answers(
    tmp_path: Path, make_database: Callable[[], str]
) -> None:
    assert len(served_blocks()) >= 5
    store = Store("sqlite", f"sqlite:///{tmp_path / 'api.db'}").migrate()
    with served(store, "--no-access-log") as base:
        shell = ApiShell(tmp_path, make_database, base)
        written: list[tuple[Step, list[str]]] = []
        for block in served_blocks():
            for step in block.steps():
                actual = shell.run(step.command)
                expected, got = shell.normalised(step.expected, actual)
                if WRITE:
                    written.append((step, shell.shown_output(actual)))
                else:
                    assert got == expected, _mismatch(block, step, shell.shown_output(actual))
    if WRITE:
        _write(DOC, written, shell.ids)
