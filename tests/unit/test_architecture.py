"""The package's shape, pinned: a light core, small modules, imports that point one way.

Metrics and tracing are observers in extras: importing the package must not pull in
``prometheus_client`` or OpenTelemetry. Modules stay readable in one sitting. And no two
modules import each other, directly or through others, including imports deferred into
functions: a cycle is what makes a layer impossible to read (or test) alone.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import simpleworkflow

PACKAGE = Path(simpleworkflow.__file__).parent
MAX_LINES = 500


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(
    name: str, path: Path, modules: dict[str, Path], *, typing_too: bool = False
) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its text (not only at the top:
    a deferred import is still a dependency), except under ``if TYPE_CHECKING:`` unless
    ``typing_too``."""
    tree = ast.parse(path.read_text())
    typing_only = (
        set()
        if typing_too
        else {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
            for stmt in block.body
            for node in ast.walk(stmt)
        }
    )
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (module -> modules it imports), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_inside_the_package() -> None:
    modules = _modules()
    graph = {
        name: {t for t in _imports(name, path, modules) if not name.startswith(t + ".")}
        for name, path in modules.items()
    }
    # A package's __init__ that re-exports its modules is not a cycle with them.
    cycle = _cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_no_module_is_longer_than_a_sitting() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_importing_the_package_pulls_in_no_metrics_or_tracing_library() -> None:
    probe = (
        "import sys, simpleworkflow, simpleworkflow.worker, simpleworkflow.cli; "
        "print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('prometheus_client', 'opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


#: The only modules outside ``backends/`` that may import it (docs/architecture.md, "Who
#: may touch a store"): the faces that run ops, and the engine, which writes the journal
#: and the outcomes of attempts. Everything else (the CLI, the HTTP API, the dashboard,
#: metrics, tracing, the plain data) acts through the client and admin faces and takes its
#: records from ``models``, so that a store's internals can change under them.
MAY_IMPORT_BACKENDS = {
    "simpleworkflow.client": "the producer's face: starts, signals, listings",
    "simpleworkflow.admin": "the operator's face",
    "simpleworkflow.worker": "claims, leases, outcomes, the worker's services",
    "simpleworkflow.durable": "the engine: journal writes, suspensions, lease checks",
    # Ops that a worker's service and an admin verb share.
    "simpleworkflow.retention": "the sweep's batch loop (worker/sweeper.py, admin's sweep)",
    "simpleworkflow.schedule_runs": "a cron tick's run (worker/scheduler.py, admin's trigger)",
    # The test harness: its clock's look at the store, a replay's recorded journal.
    "simpleworkflow.testing": "the test harness (docs/testing.md)",
}
STORES = "simpleworkflow.backends"


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _store_imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Modules outside ``backends/`` and :data:`MAY_IMPORT_BACKENDS` that import a store's
    module, even only for type hints, with what they import."""
    found = {}
    for name, path in modules.items():
        if _within(name, STORES) or any(_within(name, may) for may in MAY_IMPORT_BACKENDS):
            continue
        imported = _imports(name, path, modules, typing_too=True)
        if stores := {target for target in imported if _within(target, STORES)}:
            found[name] = stores
    return found


def test_only_the_faces_and_the_engine_import_the_stores() -> None:
    """The CLI, the HTTP API, the dashboard, metrics and tracing import no ``backends.*``."""
    modules = _modules()
    assert _store_imports(modules) == {}
    gone = [name for name in MAY_IMPORT_BACKENDS if name not in modules]
    assert gone == [], "no such module: take it out of MAY_IMPORT_BACKENDS"


def test_the_store_import_check_sees_an_import(tmp_path: Path) -> None:
    """A surface that imports a store, at the top or deferred or for type hints, is found."""
    surface = tmp_path / "surface.py"
    surface.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from simpleworkflow.backends.ops import Op\n"
        "def f():\n    from simpleworkflow import backends\n"
    )
    modules = {**_modules(), "simpleworkflow.cli.surface": surface}
    found = _store_imports(modules)
    assert found == {"simpleworkflow.cli.surface": {STORES, f"{STORES}.ops"}}


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_dashboard_and_the_api_meet_only_in_web_and_in_the_app_that_serves_both() -> None:
    """``web`` (tokens, the client source, problems, the guard) is below both faces; the
    dashboard never imports the API, so that only ``server.create_app`` puts them together."""
    modules = _modules()
    below = {"simpleworkflow.web": ("simpleworkflow.server", "simpleworkflow.dashboard")}
    below["simpleworkflow.dashboard"] = ("simpleworkflow.server",)
    upward = {
        f"{name} -> {target}"
        for name, path in modules.items()
        for package, above in below.items()
        if name == package or name.startswith(package + ".")
        for target in _imports(name, path, modules)
        if target.startswith(above)
    }
    assert upward == set()


ARCHITECTURE_DOC = PACKAGE.parent / "docs" / "architecture.md"


def _indexed_modules() -> set[str]:
    """The module paths (relative to the package) that docs/architecture.md's
    "Every module" section lists, one ``- `path.py`: ...`` line each."""
    text = ARCHITECTURE_DOC.read_text()
    section = text.split("\n## Every module\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([\w/]+\.py)`:", section, flags=re.MULTILINE))


def test_the_architecture_doc_lists_every_module_and_no_other() -> None:
    on_disk = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")}
    listed = _indexed_modules()
    assert sorted(on_disk - listed) == [], "add these to docs/architecture.md, Every module"
    assert sorted(listed - on_disk) == [], "gone: take these out of docs/architecture.md"


def test_each_backend_verb_is_defined_by_one_mixin_only() -> None:
    """A verb's name leads to one file: no mixin of ``Backend`` shadows another's."""
    from simpleworkflow.backends.base import Backend

    mixins = [k for k in Backend.__mro__[1:] if k.__module__.endswith("_ops")]
    assert len(mixins) >= 8
    owners: dict[str, list[str]] = {}
    for mixin in mixins:
        for name in vars(mixin):
            if not name.startswith("_"):
                owners.setdefault(name, []).append(mixin.__name__)
    shadowed = {name: found for name, found in owners.items() if len(found) > 1}
    assert shadowed == {}
