"""The layout's one direction of dependency: openapi.yaml -> generated/ -> volcano/, and the
server beside the SDK, neither importing the other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(package: str) -> dict[str, set[str]]:
    """Every module each file of `package` imports (absolute names; relative ones resolved)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
        found[str(path.relative_to(ROOT))] = names
    return found


class TestDependencyDirection:
    @pytest.mark.parametrize(
        ("package", "forbidden"), [("volcano", "volcano_server"), ("volcano_server", "volcano")]
    )
    def test_sdk_and_server_never_import_each_other(self, package: str, forbidden: str) -> None:
        """Neither package imports the other, in any file, even lazily inside a function."""
        offenders = {
            path: sorted(n for n in names if n == forbidden or n.startswith(forbidden + "."))
            for path, names in imported_modules(package).items()
        }
        assert {path: names for path, names in offenders.items() if names} == {}

    def test_server_does_not_import_the_generated_client(self) -> None:
        """The server reads openapi.yaml itself; the generated client is the SDK's layer."""
        offenders = [
            p
            for p, names in imported_modules("volcano_server").items()
            if any(n.startswith("_volcano_api") for n in names)
        ]
        assert offenders == []

    def test_generated_code_imports_nothing_of_ours(self) -> None:
        """generated/ depends on httpx and attrs only, never on volcano or the server."""
        ours = ("volcano", "volcano_server")
        offenders = [
            p
            for p, names in imported_modules("generated").items()
            if any(n.split(".")[0] in ours for n in names)
        ]
        assert offenders == []

    def test_the_scan_sees_imports(self) -> None:
        """The scanner itself works: it finds the seam's import of the generated client."""
        assert any(
            n.startswith("_volcano_api")
            for n in imported_modules("volcano")["volcano/_seam/_reading.py"]
        )


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of `package` (dotted) -> the modules of `package` it imports, every import
    counted: at the top, under TYPE_CHECKING, or inside a function."""
    root = ROOT / package
    modules = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in root.rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name if is_package else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")
                    parent = ".".join(parts[: len(parts) - node.level + 1])
                    base = f"{parent}.{base}" if base else parent
                # `from package import module` imports that module; a name, its module.
                found.update(
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                )
        graph[name] = {target for target in found if target in modules and target != name}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in `graph` (its modules, the first repeated at the end), or None."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return None
        for target in sorted(graph[name]):
            circle = visit(target, [*path, name])
            if circle is not None:
                return circle
        done.add(name)
        return None

    for name in sorted(graph):
        circle = visit(name, [])
        if circle is not None:
            return circle
    return None


class TestImportGraph:
    def test_no_import_circle_in_the_sdk(self) -> None:
        """volcano/ imports downward only: no module imports, even lazily or for typing only,
        a module that imports it back (the guards once imported the clients that made them)."""
        circle = find_circle(import_graph("volcano"))
        assert circle is None, " -> ".join(circle or [])

    def test_the_circle_finder_finds_one(self) -> None:
        """The finder itself works: a -> b -> c -> a is found, a tree is not."""
        assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
        assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None

    def test_the_graph_sees_relative_and_lazy_imports(self) -> None:
        """The graph resolves `from . import x`, `from ._x import y` and imports in functions."""
        graph = import_graph("volcano")
        assert "volcano._seam._reading" in graph["volcano._seam._operations"]  # from . import
        assert "volcano._config" in graph["volcano._base"]  # from . import _config
        assert "volcano._async_client" in graph["volcano"]  # inside __getattr__
