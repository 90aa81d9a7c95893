"""docs/api.md's curl samples show what the API answers now: they run, top to bottom,
against a real ``simpleworkflow serve`` on a fresh SQLite file, and their output is
compared as tests/test_docs.py compares the CLI's (ids and times normalised). And every
``/api/v1/...`` path the docs name is one the server has, and the endpoint table of
docs/api.md lists every operation of the OpenAPI document.

The samples name ``http://localhost:8000``; the server here listens on a free port, which
stands for it. tests/test_docs.py skips these blocks (they say so in their doc-test
comment), since they need the server. ``SIMPLEWORKFLOW_WRITE_DOCS=1`` rewrites them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from api_helpers import served
from conftest import Store
from test_docs import DOCS, ROOT, WRITE, Block, Shell, Step, _mismatch, _write, blocks

from simpleworkflow import AsyncClient
from simpleworkflow.server import create_app

DOC = ROOT / "docs" / "api.md"
SHOWN_BASE = "localhost:8000"
MARK = "skip: run against a server by tests/processes/test_api_docs.py"


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


# -- the paths the docs name ------------------------------------------------------------

API_PATH = re.compile(r"/api/v1(?:/[A-Za-z0-9_.{}%:-]+)+")
TABLE_ROW = re.compile(r"^\| `(GET|POST|PUT|DELETE|PATCH) (/[^`?\[ ]*)[^`]*` \|")


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The server's OpenAPI document (its client connects to nothing to make it)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('openapi') / 'api.db'}"
    document: dict[str, Any] = create_app(AsyncClient(url)).openapi()
    return document


def _segments_match(named: str, declared: str) -> bool:
    """A path segment of the docs against one of the document's: equal, or the document's
    is a template (``{run_id}``) and the docs name a value or a template of their own."""
    if declared.startswith("{"):
        return bool(named)
    return named == declared


def _declared(path: str, openapi: dict[str, Any]) -> bool:
    named = path.rstrip(".").split("/")
    return any(
        len(named) == len(parts) and all(map(_segments_match, named, parts))
        for parts in (declared.split("/") for declared in openapi["paths"])
    )


def test_every_api_path_the_docs_name_exists(openapi: dict[str, Any]) -> None:
    missing = [
        f"{doc.relative_to(ROOT)}:{number}: {match[0]}"
        for doc in DOCS
        for number, line in enumerate(doc.read_text().splitlines(), 1)
        for match in API_PATH.finditer(line)
        if not _declared(match[0], openapi)
    ]
    assert not missing, "paths the API does not serve:\n" + "\n".join(missing)


def _shape(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def test_the_endpoint_table_lists_every_operation(openapi: dict[str, Any]) -> None:
    listed = {
        (match[1], _shape(match[2]))
        for line in DOC.read_text().splitlines()
        if (match := TABLE_ROW.match(line))
    }
    served = {
        (method.upper(), _shape(path))
        for path, operations in openapi["paths"].items()
        for method in operations
    }
    assert sorted(served - listed) == [], "docs/api.md's endpoint table lacks these"
    assert sorted(listed - served - {("GET", "/metrics")}) == [], "the table lists these"
