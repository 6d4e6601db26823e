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
            for n in imported_modules("volcano")["volcano/_transport.py"]
        )
