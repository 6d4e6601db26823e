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


# The server's map (CONTRIBUTING.md, "The server's layers"): each part -> the parts it may import.
# A part is a package of volcano_server/ or one of its top modules; what is not listed here is a
# new part to place on the map first. Dependencies point one way: no part imports one that
# may import it back.
SERVER_MAP: dict[str, frozenset[str]] = {
    "volcano_server": frozenset({"app", "_config"}),  # create_app, ServerConfig
    "__main__": frozenset({"cli"}),  # python -m volcano_server
    "cli": frozenset({"app", "http", "_config", "telemetry", "storage"}),
    "app": frozenset(
        {"http", "transport", "groups", "locks", "wire", "_config", "telemetry", "storage"}
    ),
    "http": frozenset({"transport", "groups", "locks", "wire", "_config", "telemetry", "storage"}),
    "transport": frozenset({"wire", "_config", "telemetry"}),
    "groups": frozenset({"locks", "wire", "_config", "telemetry", "storage"}),
    "locks": frozenset({"wire", "_config", "telemetry", "storage"}),
    "wire": frozenset(),
    "_config": frozenset({"storage"}),
    "telemetry": frozenset(),
    "storage": frozenset(),
}


def server_part(module: str) -> str:
    """The map's part of a module of volcano_server: `volcano_server.locks._rules` -> `locks`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


class TestServerLayers:
    def test_no_import_circle_in_the_server(self) -> None:
        """volcano_server/ imports downward only, every import counted (typing-only and lazy
        ones too): cli.py and _keys_cli.py once imported each other, as did _accesslog and
        _metrics, and storage's _base and _keys."""
        circle = find_circle(import_graph("volcano_server"))
        assert circle is None, " -> ".join(circle or [])

    def test_every_part_of_the_server_is_on_the_map(self) -> None:
        """A new package or top module of volcano_server/ is placed on the map before it lands."""
        parts = {server_part(name) for name in import_graph("volcano_server")}
        assert parts == set(SERVER_MAP)

    def test_the_map_points_one_way(self) -> None:
        """The map itself has no circle, and telemetry, storage and wire import no other part."""
        assert find_circle({part: set(allowed) for part, allowed in SERVER_MAP.items()}) is None
        assert SERVER_MAP["telemetry"] == SERVER_MAP["storage"] == SERVER_MAP["wire"] == set()

    def test_no_import_against_the_map(self) -> None:
        """Each module imports only its own part and the parts the map lets its part import."""
        against = sorted(
            f"{name} -> {target}"
            for name, targets in import_graph("volcano_server").items()
            for target in targets
            if server_part(target) != server_part(name)
            and server_part(target) not in SERVER_MAP[server_part(name)]
        )
        assert against == []

    def test_the_map_check_sees_a_wrong_way_import(self) -> None:
        """The check itself works: the lock rules importing the HTTP layer would be against it."""
        assert "http" not in SERVER_MAP[server_part("volcano_server.locks._rules")]
        assert server_part("volcano_server._config") == "_config"
        assert server_part("volcano_server") == "volcano_server"
