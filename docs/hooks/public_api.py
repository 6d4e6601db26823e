"""A griffe extension for the Python API pages: no parameter a user may not pass.

A parameter whose name starts with `_` (`Client(_clock=...)`, for tests) is left out of the
rendered signature. Private bases (`BaseClient[...]`) are hidden by the pages that inherit from
them (`show_bases: false` beside `inherited_members: true`), not here: griffe needs the bases to
find the inherited members. `tests/tooling/test_docs.py` checks the built pages for private
names and for the inherited members.
"""

from __future__ import annotations

from typing import Any

import griffe


class PublicApi(griffe.Extension):
    """Drop private parameters from what the API pages render."""

    def on_function_instance(self, *, func: griffe.Function, **kwargs: Any) -> None:
        """Leave `_`-named parameters out of the signature."""
        for parameter in [p for p in func.parameters if p.name.startswith("_")]:
            del func.parameters[parameter.name]
