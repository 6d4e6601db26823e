"""A Django management command under a Volcano lock, and `locked_migrate`, in one script.

In a project, the settings below are in settings.py, the command in
`myapp/management/commands/send_reminders.py`, and both run as `python manage.py ...`. Here
it all runs as `python django_command.py`, with the VOLCANO_* variables set (see
walkthrough.py) and `pip install "volcano[django]"`:

1. `locked_migrate` migrates Django's own apps into a SQLite file, one process at a time;
2. `send_reminders` runs under the lock `django:send_reminders`;
3. while another process holds that lock, it exits with status 75 (the `volcano` command's
   "held"), saying so on stderr.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import django
from django.conf import settings

database = Path(tempfile.mkdtemp()) / "db.sqlite3"
settings.configure(
    INSTALLED_APPS=[
        "django.contrib.contenttypes",
        "django.contrib.auth",
        "volcano.integrations.django",  # for `locked_migrate`
    ],
    DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(database)}},
    # VOLCANO_API_URL = ..., VOLCANO_ANON_KEY = ..., VOLCANO_SERVICE_KEY = ... (else the
    # environment's)
)
django.setup()

from django.core.management import call_command  # noqa: E402 - after django.setup()
from django.core.management.base import CommandError  # noqa: E402

from volcano.integrations.django import LockedCommand, get_client  # noqa: E402


class Command(LockedCommand):
    """send_reminders: on one machine at a time, wherever the CronJob starts it."""

    help = "Send today's reminders."
    lock_key = "django:send_reminders"  # the default in .../commands/send_reminders.py
    lock_ttl = 60

    def handle(self, *args: Any, **options: Any) -> None:
        for reminder in ("alice", "bob"):
            self.lock.check()  # raises volcano.LockLostError once the lock is lost: exit 76
            self.stdout.write(
                f"reminder for {reminder} sent, fencing token {self.lock.lease.fencing_token}"
            )


if __name__ == "__main__":
    call_command("locked_migrate", verbosity=1)  # every pod may run it: one at a time
    call_command(Command())
    client = get_client()
    held = client.locks.acquire("django:send_reminders", ttl=30)  # "another pod"
    try:
        call_command(Command())
    except CommandError as error:
        print(f"exit status {error.returncode}: {error}")
    else:
        raise SystemExit("send_reminders ran while another process held its lock")
    finally:
        client.locks.release("django:send_reminders", held)
