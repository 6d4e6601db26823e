"""The command's one error, apart so that its subcommands raise it without importing it back."""

from __future__ import annotations

__all__ = ["Fatal"]


class Fatal(Exception):
    """A failure reported as one line."""
