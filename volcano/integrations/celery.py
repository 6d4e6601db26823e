"""Celery tasks that never run twice at once, and a `celery beat` that survives its host.

`pip install "volcano[celery]"`. Two pieces, on the SDK's public API only:

- `LockedTask`, a task base class. While the task's body runs, the worker holds a lease on a
  key built from the task's name and arguments (taken when the task starts on a worker, not
  when it is queued), renewed in the background. The body reads its guard as `self.lock`
  (`bind=True`): `self.lock.lease.fencing_token` for the data store, `self.lock.check()` to
  stop once ownership is lost. When another worker holds the key, the task waits in line
  (`lock_wait`), then skips, retries with Celery's retry after the server's `Retry-After`,
  or fails, as `lock_on_held` says. A worker killed with `kill -9` stops renewing, so the key
  is free once the ttl has run out, never later.
- `ElectedScheduler`, a beat scheduler (`celery beat -S volcano.integrations.celery.
  ElectedScheduler`): run several beats, one is elected leader (`client.elections`) and
  dispatches; the others follow, and the next in line takes over within the ttl when the
  leader dies.

```python
from celery import Celery
from volcano.integrations.celery import LockedTask

app = Celery("billing", broker="redis://localhost:6379/0")


@app.task(base=LockedTask, bind=True, lock_ttl=30, lock_on_held="retry")
def send_invoices(self, customer_id: int) -> None:
    for invoice in invoices_of(customer_id):
        self.lock.check()  # raises volcano.LockLostError once ownership is lost
        send(invoice, fence=self.lock.lease.fencing_token)
```

Settings (`app.conf`, each defaulting to the SDK's environment variable): `volcano_api_url`,
`volcano_anon_key`, `volcano_service_key`, `volcano_timeout`; for beat `volcano_beat_election`
(default `"celery-beat"`) and `volcano_beat_ttl` (default 10 s). Each worker process builds
its own client on first use (a forked pool child never shares its parent's renewal thread)
and closes it when the process shuts down. Messages go to Celery's task logger
(`celery.utils.log.get_task_logger`) and beat's logger.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from celery import Task, signals
from celery.beat import PersistentScheduler
from celery.utils.dispatch import Signal
from celery.utils.log import get_logger, get_task_logger

import volcano

from . import _naming

if TYPE_CHECKING:
    from celery import Celery
    from celery.beat import ScheduleEntry

__all__ = [
    "ElectedScheduler",
    "LockedTask",
    "OnHeld",
    "task_lock_held",
    "task_lock_lost",
    "volcano_client",
]

OnHeld = Literal["skip", "retry", "fail"]
"""What a `LockedTask` does when the key is still held once its wait is over."""

task_lock_held = Signal(name="task_lock_held", providing_args=("key", "action", "retry_after"))
"""Sent (sender: the task) when a task found its key held: `action` is `lock_on_held`."""

task_lock_lost = Signal(name="task_lock_lost", providing_args=("key", "reason"))
"""Sent (sender: the task) when a task's body ended after its lease was lost."""

_LOCK_FIELD = "volcano_lock"  # the guard's place in the request context of a run
_task_logger = get_task_logger(__name__)
_beat_logger = get_logger("celery.beat")

_clients: dict[tuple[int, int], volcano.Client] = {}
_clients_lock = threading.Lock()


def volcano_client(app: Celery) -> volcano.Client:
    """This process's `volcano.Client` for `app`, built on first use from `app.conf`.

    `volcano_api_url`, `volcano_anon_key` and `volcano_service_key` default to the SDK's
    environment variables (`VOLCANO_API_URL`, ...), `volcano_timeout` to 10 s. One client per
    process: a prefork pool child builds its own (a client's renewal thread does not survive a
    fork), and closes it when the process shuts down (`worker_process_shutdown`).
    """
    slot = (id(app), os.getpid())
    with _clients_lock:
        client = _clients.get(slot)
        if client is None:
            conf = app.conf
            client = volcano.Client(
                api_url=conf.get("volcano_api_url"),
                anon_key=conf.get("volcano_anon_key"),
                service_key=conf.get("volcano_service_key"),
                timeout=conf.get("volcano_timeout") or 10.0,
            )
            _clients[slot] = client
        return client


@signals.worker_process_shutdown.connect(weak=False)
@signals.worker_shutdown.connect(weak=False)
def _close_clients(**_: object) -> None:
    """Close this process's clients: their guards stop renewing (the worker is going)."""
    pid = os.getpid()
    with _clients_lock:
        mine = [slot for slot in _clients if slot[1] == pid]
        closing = [_clients.pop(slot) for slot in mine]
    for client in closing:
        client.close()


class LockedTask(Task[..., Any]):
    """A Celery task whose body runs under a Volcano lease, one run per key at a time.

    Use it as the task's base; every option is a task attribute, so it can be given to
    `@app.task(...)` or set on a subclass:

    ```python
    @app.task(base=LockedTask, bind=True, lock_key="report:{day}", lock_wait=60)
    def daily_report(self, day: str) -> None:
        write_report(day, fence=self.lock.lease.fencing_token)
    ```

    When a worker starts the task (not when it is queued), it acquires the key with
    `with_lock` (renewed in the background, released when the body returns or raises) and
    runs the body; `self.lock` is that guard, for the body to check (`self.lock.check()`,
    `self.lock.lost`) and to fence its writes with (`self.lock.lease.fencing_token`). A body
    that returns after its lease was lost makes the task fail with `volcano.LockLostError`
    (its result is dropped, and `task_lock_lost` is sent): its later writes may have raced a
    new holder's, so only fenced writes are safe. Called directly (`task(...)`) it locks too.

    Attributes:
        lock_key: The key. None (the default): `celery:<task name>:<digest of the
            arguments>`, so the same task with the same arguments (positional or by name,
            defaults filled in) is one key. A string is a format filled with the task's
            arguments by name (`"report:{day}"`); a callable gets the task's arguments and
            returns the key.
        lock_ttl: The lease's ttl in seconds (default 30): how long a killed worker keeps
            the key. Renewed a third of the way through, so a long body keeps it.
        lock_wait: Seconds to wait in the key's line for the holder to finish (default 0).
            The worker's slot is busy meanwhile.
        lock_on_held: When the key is still held after the wait: `"skip"` (the default: log
            it, send `task_lock_held`, and succeed with None), `"retry"` (Celery's
            `self.retry`, with `countdown` the server's Retry-After: when the holder's lease
            ends, within the task's `max_retries`) or `"fail"` (raise
            `volcano.LockHeldError`, e.g. for `autoretry_for`).
        lock_limit: How many runs may hold the key at once (default 1; above 1 a semaphore).
    """

    lock_key: str | Callable[..., str] | None = None
    lock_ttl: float = 30.0
    lock_wait: float = 0.0
    lock_on_held: OnHeld = "skip"
    lock_limit: int = 1

    @property
    def lock(self) -> volcano.LockGuard:
        """The guard of the run under way: its lease, `lost`, `check()`, `wait_lost()`.

        Raises:
            volcano.GuardStateError: Read outside the task's body.
        """
        guard = self.request.get(_LOCK_FIELD)
        if not isinstance(guard, volcano.LockGuard):
            raise volcano.GuardStateError(
                f"{self.name}.lock is read outside the task's body (use bind=True and read "
                "self.lock while the task runs)"
            )
        return guard

    def lock_key_for(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        """The key a run with these arguments locks (see `lock_key`)."""
        # A function given as `lock_key=` is a class attribute of the task: read it unbound.
        lock_key = inspect.getattr_static(self, "lock_key")
        if isinstance(lock_key, staticmethod | classmethod):
            lock_key = lock_key.__get__(None, type(self))
        if callable(lock_key):
            return str(lock_key(*args, **kwargs))
        arguments = _arguments(self.run, args, kwargs)
        if isinstance(lock_key, str):
            return lock_key.format(**arguments)
        return _naming.work_key("celery", self.name, arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the body under the lock (Celery calls this on the worker, and so does `task()`)."""
        # A worker (and apply()) has pushed this run's request; a direct call has none, and
        # Celery's own __call__, which would push one, also calls the body without the lock.
        if not self.request.called_directly:
            return self._run_locked(args, kwargs)
        self.push_request(args=args, kwargs=kwargs)
        try:
            return self._run_locked(args, kwargs)
        finally:
            self.pop_request()

    def _run_locked(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.lock_on_held not in ("skip", "retry", "fail"):
            raise volcano.InvalidArgumentError(
                f"{self.name}.lock_on_held must be 'skip', 'retry' or 'fail', "
                f"not {self.lock_on_held!r}"
            )
        key = self.lock_key_for(args, kwargs)
        guard = volcano_client(self.app).locks.with_lock(
            key,
            ttl=self.lock_ttl,
            wait=self.lock_wait,
            limit=self.lock_limit,
            label=_naming.label(
                self.request.hostname or socket.gethostname(), os.getpid(), self.request.id
            ),
        )
        with contextlib.ExitStack() as stack:
            stack.callback(self._ended, key, guard)  # runs last: after the guard's release
            try:
                stack.enter_context(guard)
            except volcano.LockHeldError as held:
                return self._held(key, held)
            self.request.update({_LOCK_FIELD: guard})
            try:
                result = self.run(*args, **kwargs)
            finally:
                self.request.update({_LOCK_FIELD: None})
        if guard.lost:
            reason = guard.lost_reason
            raise volcano.LockLostError(
                f"the lease on {key!r} was lost while {self.name} ran: {reason}"
            ) from reason
        return result

    def _ended(self, key: str, guard: volcano.LockGuard) -> None:
        """The run ended (the guard let go, or was never entered): report a loss."""
        if guard.state is volcano.GuardState.LOST:
            task_lock_lost.send(sender=self, key=key, reason=guard.lost_reason)

    def _held(self, key: str, held: volcano.LockHeldError) -> None:
        """The key is held by another owner: skip, retry or fail, as `lock_on_held` says."""
        action = self.lock_on_held
        task_lock_held.send(sender=self, key=key, action=action, retry_after=held.retry_after)
        if action == "retry":
            # Celery's own retry: counted against max_retries, and default_retry_delay when
            # the server gave no Retry-After.
            raise self.retry(exc=held, countdown=held.retry_after)
        if action == "fail":
            raise held
        _task_logger.info(
            "%s[%s] skipped: %r is held by another owner (its lease ends in %ss)",
            self.name,
            self.request.id,
            key,
            held.retry_after,
        )


def _arguments(
    function: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """The call's arguments by name, defaults filled in: one key however they were passed."""
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except TypeError:  # the body will refuse these arguments itself, with Celery's message
        return {"args": list(args), "kwargs": dict(kwargs)}
    bound.apply_defaults()
    return dict(bound.arguments)


# -- beat --------------------------------------------------------------------------------------

FOLLOW_INTERVAL = 1.0
"""Seconds between a following beat's ticks: the delay it adds to a takeover, at most."""


class _Candidacy:
    """A beat's campaign, in a thread of its own: the current leadership, or None.

    The campaign waits in the election's line as long as it takes; once elected, it holds
    the leadership until it is lost (then campaigns again) or the scheduler closes (then
    resigns). Failures to reach the server are logged and waited out.
    """

    def __init__(self, client: volcano.Client, name: str, ttl: float, label: str) -> None:
        self._client = client
        self._name = name
        self._ttl = ttl
        self._label = label
        self._lock = threading.Lock()
        self._leadership: volcano.Leadership | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=self._campaign, name="volcano-beat-election", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def leadership(self) -> volcano.Leadership | None:
        """The leadership while it lasts, else None."""
        with self._lock:
            leadership = self._leadership
        return None if leadership is None or leadership.lost else leadership

    def stop(self, timeout: float) -> None:
        """Stop campaigning; a leader resigns (waits up to `timeout` for it).

        A candidate still waiting in line is not waited for: its request ends with the
        process, and the server takes it out of line when its connection closes.
        """
        self._stop.set()
        self._wake.set()
        with self._lock:
            leading = self._leadership is not None
        if leading:
            self._thread.join(timeout)

    def _campaign(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                with self._client.elections.campaign(
                    self._name, ttl=self._ttl, label=self._label, on_lost=self._lost
                ) as leadership:
                    self._lead(leadership)
            except volcano.Error as error:
                _beat_logger.warning("beat: campaign for %r failed: %s", self._name, error)
                self._stop.wait(self._ttl / 3)

    def _lead(self, leadership: volcano.Leadership) -> None:
        with self._lock:
            self._leadership = leadership
        _beat_logger.info(
            "beat: elected leader of %r in term %s (%s); dispatching",
            self._name,
            leadership.term,
            self._label,
        )
        while not (self._stop.is_set() or leadership.lost):
            self._wake.wait()
            self._wake.clear()
        with self._lock:
            self._leadership = None
        if leadership.lost:
            _beat_logger.warning(
                "beat: lost the leadership of %r (term %s): %s; no longer dispatching",
                self._name,
                leadership.term,
                leadership.lost_reason,
            )

    def _lost(self, _: volcano.Error) -> None:
        self._wake.set()


class ElectedScheduler(PersistentScheduler):
    """A `celery beat` scheduler that dispatches only while this beat is the elected leader.

    Run as many beats as you like (`celery -A proj beat -S
    volcano.integrations.celery.ElectedScheduler`): each campaigns in the election named by
    `volcano_beat_election` (default `"celery-beat"`), labelled with its host and pid; the
    leader dispatches the schedule as `PersistentScheduler` does, the others tick once a
    second without dispatching. When the leader stops (SIGTERM, Ctrl-C) it resigns and the
    next beat in line leads at once; when it dies (`kill -9`, a lost host) its lease runs
    out after `volcano_beat_ttl` seconds (default 10) and the next leads then. A leader whose
    lease is lost (the lock server unreachable for a ttl) stops dispatching at once.

    What a new leader sends: a follower keeps its schedule in step with the leader's, taking
    an entry as sent once it has been due for longer than the ttl while another beat held the
    office (its live lease shows it was alive after the entry fell due). On taking over, it
    sends at once whatever fell due since: a task due during the failover is sent late, never
    missed, and one due in the last moments (about a third of the ttl) before the leader died
    may be sent twice. Tasks that must not run twice at once should be `LockedTask`s.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._candidacy: _Candidacy | None = None
        self._client: volcano.Client | None = None
        self._leading = False
        self._due_since: dict[str, float] = {}
        super().__init__(*args, **kwargs)

    @property
    def election(self) -> str:
        """The election's name (`volcano_beat_election`)."""
        return str(self.app.conf.get("volcano_beat_election") or "celery-beat")

    @property
    def ttl(self) -> float:
        """The leader's lease ttl in seconds (`volcano_beat_ttl`): the longest takeover."""
        return float(self.app.conf.get("volcano_beat_ttl") or 10.0)

    def setup_schedule(self) -> None:
        """Set the schedule up as beat does, then start campaigning."""
        super().setup_schedule()
        # Only a scheduler that will tick campaigns (beat also makes lazy ones, to describe).
        conf = self.app.conf
        self._client = volcano.Client(
            api_url=conf.get("volcano_api_url"),
            anon_key=conf.get("volcano_anon_key"),
            service_key=conf.get("volcano_service_key"),
            timeout=conf.get("volcano_timeout") or 10.0,
        )
        self._candidacy = _Candidacy(
            self._client, self.election, self.ttl, _naming.label(socket.gethostname(), os.getpid())
        )
        self._candidacy.start()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Dispatch what is due while leading; otherwise follow the leader's schedule."""
        leading = self._candidacy is not None and self._candidacy.leadership() is not None
        if leading:
            if not self._leading:
                self.populate_heap()  # from the entries as followed so far
                self._leading = True
            return super().tick(*args, **kwargs)
        self._leading = False
        self._follow()
        return min(float(self.max_interval or FOLLOW_INTERVAL), FOLLOW_INTERVAL)

    def close(self) -> None:
        """Resign (the next beat in line leads at once), then close as beat does."""
        if self._candidacy is not None:
            self._candidacy.stop(timeout=5.0)
        try:
            super().close()
        finally:
            if self._client is not None:
                self._client.close()

    def _follow(self) -> None:
        """Take as sent the entries due for longer than the ttl while another beat leads."""
        now = time.monotonic()
        overdue: list[ScheduleEntry] = []
        for name, entry in list(self.schedule.items()):
            try:
                is_due, _ = entry.is_due()
            except Exception:  # the leader logs a broken schedule; follow the rest
                _beat_logger.debug("beat: cannot tell when %r is due", name, exc_info=True)
                continue
            if not is_due:
                self._due_since.pop(name, None)
                continue
            since = self._due_since.setdefault(name, now)
            if now - since > self.ttl + FOLLOW_INTERVAL:
                overdue.append(entry)
        if overdue and self._led_by_another():
            for entry in overdue:
                self.reserve(entry)
                self._due_since.pop(str(entry.name), None)

    def _led_by_another(self) -> bool:
        """Whether another beat holds the office now (False when the server cannot say)."""
        if self._client is None:
            return False
        try:
            return self._client.elections.leader(self.election) is not None
        except volcano.Error as error:
            _beat_logger.debug("beat: cannot read the leader of %r: %s", self.election, error)
            return False
