"""The Volcano reference lock server: openapi.yaml served over SQLite or PostgreSQL."""

from __future__ import annotations

__all__: list[str] = []
