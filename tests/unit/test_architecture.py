"""The package's shape, pinned: a light core, small modules, imports that point one way.

Metrics and tracing are observers in extras: importing the package must not pull in
``prometheus_client`` or OpenTelemetry. Modules stay readable in one sitting. And no two
modules import each other, directly or through others, including imports deferred into
functions: a cycle is what makes a layer impossible to read (or test) alone.
"""

from __future__ import annotations

import ast
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


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its text (not only at the top:
    a deferred import is still a dependency), except under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body
        for node in ast.walk(stmt)
    }
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
