"""Django management commands under a Volcano lock, and a client configured from settings.

`pip install "volcano[django]"`, then add `"volcano.integrations.django"` to
`INSTALLED_APPS` for the `locked_migrate` command. On the SDK's public API only:

- `get_client()`: this process's `volcano.Client`, from the settings `VOLCANO_API_URL`,
  `VOLCANO_ANON_KEY`, `VOLCANO_SERVICE_KEY` (and `VOLCANO_TIMEOUT`), each defaulting to the
  environment variable of the same name. Changing one of them (`override_settings` in tests)
  makes the next call build a new client.
- `LockedCommand`, a `BaseCommand` whose `handle` runs while the process holds a lease on
  the command's key (renewed in the background): a command run from a CronJob on every pod
  runs on one of them at a time. Use it as the base of a command of your own, or before a
  command you reuse (`class Command(LockedCommand, migrate.Command)`). Exit statuses are
  the `volcano` command's: 75 when the key is still held once `--lock-wait` has run out, 76
  when the lock was lost while the command ran, 69 when the lock server cannot be reached, 77
  when it refuses the keys, 64 for a bad key or option.
- `manage.py locked_migrate`: `migrate`, one pod at a time.

```python
from volcano.integrations.django import LockedCommand


class Command(LockedCommand):  # myapp/management/commands/send_reminders.py
    help = "Send today's reminders, on one machine at a time."
    lock_ttl = 60

    def handle(self, *args, **options):
        for reminder in due_reminders():
            self.lock.check()  # raises volcano.LockLostError once the lock is lost
            send(reminder, fence=self.lock.lease.fencing_token)
```
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.core.signals import setting_changed

import volcano

from .. import _naming

if TYPE_CHECKING:
    from django.core.management.base import CommandParser

__all__ = ["SETTINGS", "LockedCommand", "exit_status", "get_client"]

SETTINGS = ("VOLCANO_API_URL", "VOLCANO_ANON_KEY", "VOLCANO_SERVICE_KEY", "VOLCANO_TIMEOUT")
"""The settings `get_client` reads; each unset one falls back to the environment."""

_clients: dict[int, volcano.Client] = {}
_clients_lock = threading.Lock()


def get_client() -> volcano.Client:
    """This process's `volcano.Client`, built on first use from the settings.

    Raises:
        volcano.InvalidArgumentError: A key is set neither in the settings nor in the
            environment (the message names its variable).
    """
    pid = os.getpid()  # a forked process builds its own: renewal threads do not survive a fork
    with _clients_lock:
        client = _clients.get(pid)
        if client is None:
            client = volcano.Client(
                api_url=getattr(settings, "VOLCANO_API_URL", None),
                anon_key=getattr(settings, "VOLCANO_ANON_KEY", None),
                service_key=getattr(settings, "VOLCANO_SERVICE_KEY", None),
                timeout=getattr(settings, "VOLCANO_TIMEOUT", None) or 10.0,
            )
            _clients[pid] = client
        return client


def _settings_changed(*, setting: str, **_: Any) -> None:
    """A VOLCANO_* setting changed: the next `get_client()` builds a client with it."""
    if setting in SETTINGS:
        with _clients_lock:
            client = _clients.pop(os.getpid(), None)
        if client is not None:
            client.close()


setting_changed.connect(_settings_changed, dispatch_uid="volcano.integrations.django")


def exit_status(error: volcano.Error, key: str) -> tuple[int, str]:  # noqa: PLR0911 - one per class
    """The `volcano` command's exit status for `error`, and the line that explains it."""
    lock = repr(key)
    if isinstance(error, volcano.InvalidArgumentError):
        return 64, str(error)
    if isinstance(error, volcano.LockHeldError):
        later = "" if error.retry_after is None else f"; its lease ends in {error.retry_after:g}s"
        return 75, f"{lock} is held by another owner{later}"
    if isinstance(error, volcano.LockLostError | volcano.LeaseNotHeldError):
        return 76, f"lost the lock on {lock}: {error}"
    if isinstance(
        error,
        volcano.LimitMismatchError
        | volcano.UnprocessableEntityError
        | volcano.RequestIdReusedError,
    ):
        return 64, f"the server refused the request for {lock}: {error}"
    if isinstance(error, volcano.AuthenticationError | volcano.PermissionDeniedError):
        return 77, (
            f"the server refused the credentials ({error}); check VOLCANO_ANON_KEY and "
            "VOLCANO_SERVICE_KEY"
        )
    if isinstance(
        error,
        volcano.APIConnectionError
        | volcano.ServiceUnavailableError
        | volcano.InternalServerError
        | volcano.RateLimitError,
    ):
        return 69, f"cannot reach the lock server, or it cannot serve the request now: {error}"
    return 70, f"unexpected answer from the lock server: {error}"


class LockedCommand(BaseCommand):
    """A management command whose `handle` runs under a Volcano lock.

    `self.lock` is the guard while `handle` runs: `self.lock.check()` raises
    `volcano.LockLostError` once the lock is lost (the command then exits 76), and
    `self.lock.lease.fencing_token` fences the command's writes. Options added to every
    such command: `--lock-key`, `--lock-ttl`, `--lock-wait`.

    Attributes:
        lock_key: The key; None (the default): `get_lock_key()`, `django:<command name>`.
        lock_ttl: The lease's ttl in seconds (default 30): how long a killed process keeps
            the key. Renewed in the background while the command runs.
        lock_wait: Seconds to wait in line while another process holds the key (default 0:
            exit 75 at once).
    """

    lock_key: str | None = None
    lock_ttl: float = 30.0
    lock_wait: float = 0.0

    _guard: volcano.LockGuard | None = None

    @property
    def lock(self) -> volcano.LockGuard:
        """The guard of the lock held while `handle` runs.

        Raises:
            volcano.GuardStateError: Read when the command is not running.
        """
        if self._guard is None:
            raise volcano.GuardStateError("self.lock is read while the command is not running")
        return self._guard

    def get_lock_key(self, *args: Any, **options: Any) -> str:
        """The key to hold: `lock_key`, else `django:<command name>`. Override to choose."""
        if self.lock_key is not None:
            return self.lock_key
        command = type(self).__module__.rpartition(".")[2]
        return f"django:{_naming.clean_name(command)}"

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        """Django's parser, with the lock's options (whatever `add_arguments` does)."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        group = parser.add_argument_group("Volcano lock")
        group.add_argument("--lock-key", help="the lock's key (default: %(default)s)")
        group.add_argument(
            "--lock-ttl", type=float, help="the lease's ttl in seconds (default: the command's)"
        )
        group.add_argument(
            "--lock-wait",
            type=float,
            help="seconds to wait while another process holds the lock (default: the command's)",
        )
        return parser

    def execute(self, *args: Any, **options: Any) -> str | None:
        """Acquire the lock, run the command (Django's `execute`), release.

        Raises:
            CommandError: With the `volcano` command's exit status as `returncode`: the lock
                could not be acquired, or was lost while the command ran.
        """
        key = options.get("lock_key") or self.get_lock_key(*args, **options)
        ttl = options.get("lock_ttl") or self.lock_ttl
        wait = options.get("lock_wait")
        with contextlib.ExitStack() as stack:
            try:  # keys missing from the settings, a bad key or ttl: 64, as the command's
                guard = get_client().locks.with_lock(
                    key,
                    ttl=ttl,
                    wait=self.lock_wait if wait is None else wait,
                    label=_naming.label(socket.gethostname(), os.getpid(), key),
                )
                stack.enter_context(guard)
            except volcano.Error as error:
                raise _failure(error, key) from None
            self._guard = guard
            try:
                output = super().execute(*args, **options)
            except volcano.LockLostError as error:
                raise _failure(error, key) from error
            finally:
                self._guard = None
        if guard.lost:
            raise _failure(volcano.LockLostError(f"{guard.lost_reason}"), key)
        return output


def _failure(error: volcano.Error, key: str) -> CommandError:
    status, message = exit_status(error, key)
    return CommandError(message, returncode=status)
