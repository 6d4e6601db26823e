"""`manage.py locked_migrate`: Django's `migrate`, one pod at a time, under a Volcano lock."""

from __future__ import annotations

from typing import Any

from django.core.management.commands import migrate

from volcano.integrations import _naming
from volcano.integrations.django import LockedCommand


class Command(LockedCommand, migrate.Command):
    """Run `migrate` while holding the lock `django:migrate:<database alias>`.

    Every pod of a deployment can run it at start-up: the first migrates, the others wait in
    line (10 minutes by default, `--lock-wait`) and then find nothing left to apply. Takes
    every option of `migrate`, and `--lock-key`, `--lock-ttl` and `--lock-wait`. Exit status:
    migrate's, or the `volcano` command's (75: still held when the wait ran out; 76: the lock
    was lost while migrating; 69: the lock server could not be reached).
    """

    help = "Updates database schema, one process at a time under a Volcano lock."
    lock_wait = 600.0

    def get_lock_key(self, *args: Any, **options: Any) -> str:
        """`django:migrate:<database alias>`: one migration at a time per database."""
        return f"django:migrate:{_naming.clean_name(options.get('database') or 'default')}"
