"""A griffe extension for the Python API pages: show what a user of `volcano` can use, only.

A parameter whose name starts with `_` (`Client(_clock=...)`, for tests) is left out of the
rendered signature, and so is a base class a user never names (`BaseClient[...]`, `Generic`):
the page lists the members it brings (`inherited_members`), not where they come from. Bases
that are public (`ConflictError`), built in (`ValueError`) or from the standard library
(`enum.Enum`) stay. `tests/tooling/test_docs.py` checks the built pages for private names.
"""

from __future__ import annotations

import builtins
from typing import Any

import griffe

import volcano

_PUBLIC = set(volcano.__all__) | set(dir(builtins))


class PublicApi(griffe.Extension):
    """Drop private parameters and private bases from what the API pages render."""

    def on_function_instance(self, *, func: griffe.Function, **kwargs: Any) -> None:
        """Leave `_`-named parameters out of the signature."""
        for parameter in [p for p in func.parameters if p.name.startswith("_")]:
            del func.parameters[parameter.name]

    def on_class_instance(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        """Keep only the bases a user can name."""
        cls.bases = [base for base in cls.bases if _nameable(str(base))]


def _nameable(base: str) -> bool:
    root = base.split("[", 1)[0]
    return "." in root.strip("'\"") or root in _PUBLIC
