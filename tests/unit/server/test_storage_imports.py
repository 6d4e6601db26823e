"""The storage package imports its backends lazily; the backends never import the package."""

from __future__ import annotations

import ast
from pathlib import Path

STORAGE = Path(__file__).resolve().parents[3] / "volcano_server" / "storage"


def package_imports(path: Path) -> list[str]:
    """The `from . import ...` and `from volcano_server.storage import ...` lines of a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (
            (node.level == 1 and node.module is None) or node.module == "volcano_server.storage"
        ):
            found.append(ast.unparse(node))
    return found


def test_backends_do_not_import_their_package() -> None:
    """No private module of storage imports `storage/__init__.py`, which imports them: no cycle."""
    modules = sorted(STORAGE.glob("_*.py"))
    assert {path.name for path in modules} >= {"_postgres.py", "_sqlite.py", "_base.py"}
    assert {path.name: package_imports(path) for path in modules if package_imports(path)} == {}


def test_the_scan_sees_a_package_import(tmp_path: Path) -> None:
    """The check above can fail: it finds `from . import x`."""
    module = tmp_path / "_m.py"
    module.write_text("from . import redact_url\nfrom ._base import LockRow\n")
    assert package_imports(module) == ["from . import redact_url"]
