"""Volcano: project-scoped leases (distributed locks) for trusted server code."""

from __future__ import annotations

from ._version import __version__

__all__ = ["__version__"]
