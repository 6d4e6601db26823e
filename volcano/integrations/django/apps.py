"""The Django app of `volcano.integrations.django`: add it to INSTALLED_APPS for its commands."""

from __future__ import annotations

from django.apps import AppConfig


class VolcanoConfig(AppConfig):
    """Volcano locks: the `locked_migrate` management command (no models)."""

    name = "volcano.integrations.django"
    label = "volcano"
    verbose_name = "Volcano locks"
