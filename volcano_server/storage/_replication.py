"""PostgreSQL with standbys: where connections go, and when a commit is acknowledged.

A fencing token is issued twice only if a commit that a client was told about is lost. On one
PostgreSQL that takes a crash with `synchronous_commit = off`. With standbys it takes a failover
to a standby that never received the commit: with asynchronous replication, the last commits
before the primary died; with a synchronous standby, none, since the primary acknowledges a
commit only once that standby has flushed it. This module keeps the server to that:

- With several hosts in the URL (`postgresql://h1,h2/db`), connections go only to the one that
  takes writes (`target_session_attrs=read-write`, the default added here): a standby before
  its promotion refuses the session, so the pool and the LISTEN connection keep trying the hosts
  until the new primary answers.
- A COMMIT waiting for a synchronous standby that is away is cancelled after the statement
  timeout (PostgreSQL runs none during that wait); it is then committed on the primary alone,
  which PostgreSQL says only in a WARNING: `Commits` answers it as "outcome unknown" (503).
- At start, `check_durability` refuses a database whose commits a crash can lose
  (`synchronous_commit = off`) and warns loudly where a failover could lose them but the server
  cannot know whether one will happen (see `judge`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs
import psycopg

from ._base import StorageUnavailable, UnsafeDatabase
from ._urls import UnsupportedDatabaseURL

__all__ = ["Commits", "Durability", "check_durability", "host_count", "judge", "writer_only"]

log = logging.getLogger("volcano_server")

# Sessions that take writes; anything else could land on a standby.
_WRITABLE_TARGETS = frozenset({"read-write", "primary"})

# The function of PostgreSQL (syncrep.c) that reports a wait for the standby cut short, with a
# WARNING whose text is translated; its name is not.
_SYNC_WAIT = "SyncRepWaitForLSN"
# How long a cancel request may take to reach the database.
_CANCEL_SECONDS = 2.0

# What the database says about its durability, in one round trip. Walsenders of logical
# replication (a subscriber is another database, never a failover target) are not counted; the
# sync state of each standby is visible only to roles with pg_read_all_stats.
_FACTS = """
SELECT current_setting('synchronous_commit'), current_setting('fsync')::bool,
    current_setting('synchronous_standby_names'), pg_is_in_recovery(),
    count(r.pid), count(r.sync_state), count(*) FILTER (WHERE r.sync_state IN ('sync', 'quorum'))
FROM (SELECT * FROM pg_stat_replication WHERE pid NOT IN (
    SELECT active_pid FROM pg_replication_slots
    WHERE slot_type = 'logical' AND active_pid IS NOT NULL)) r
"""


def host_count(params: Mapping[str, Any]) -> int:
    """How many hosts libpq parameters name (one when they name none: the default)."""
    return len(str(params.get("host") or params.get("hostaddr") or "").split(","))


def writer_only(params: Mapping[str, Any]) -> dict[str, Any]:
    """The libpq parameters, reaching only a host that takes writes when they name several.

    Raises UnsupportedDatabaseURL for several hosts with a `target_session_attrs` that would
    accept a standby.
    """
    if host_count(params) < 2:
        return dict(params)
    target = params.get("target_session_attrs")
    if target is None:
        return {**params, "target_session_attrs": "read-write"}
    if target not in _WRITABLE_TARGETS:
        raise UnsupportedDatabaseURL(
            f"target_session_attrs={target} with several hosts could connect to a standby:"
            " use read-write (the default) or primary"
        )
    return dict(params)


class Commits:
    """Bounds each COMMIT to `seconds`, and never lets one the standby may lack be acknowledged.

    A commit waits for the synchronous standby to flush it; with the standby away it would wait
    forever, since PostgreSQL disarms the statement timeout before it commits. So one thread
    cancels a COMMIT still running after `seconds`, and PostgreSQL then ends the wait, commits
    the transaction on the primary alone, and says so only in a WARNING (from its wait for the
    standby). `bounded` raises StorageUnavailable for that: whether the transaction survives
    depends on which of the two serves next, so its outcome is unknown, as with a connection
    lost during COMMIT; a retry with the same request id settles it once the standby has it.
    A cancel may land after its COMMIT ended: that connection is closed, never reused.
    """

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._lock = threading.Condition()
        self._running: dict[int, _Commit] = {}
        self._thread: threading.Thread | None = None
        self._idle = False  # the thread waits for a commit to watch, with no deadline
        self._closed = False

    @contextmanager
    def bounded(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Around the round trip that COMMITs on `conn`."""
        cut_short: list[str] = []

        def heard(notice: psycopg.errors.Diagnostic) -> None:
            if notice.severity_nonlocalized == "WARNING" and notice.source_function == _SYNC_WAIT:
                cut_short.append(notice.message_primary or "")

        commit = _Commit(conn, time.monotonic() + self._seconds)
        self._start(commit)
        conn.add_notice_handler(heard)
        try:
            yield
        finally:
            conn.remove_notice_handler(heard)
            if self._end(commit):
                conn.close()  # a cancel was sent: it must not reach this session's next query
        if cut_short:
            raise StorageUnavailable(
                f"postgresql: committed without the synchronous standby: {cut_short[0]}"
            )

    def close(self) -> None:
        """Stop the thread once no COMMIT is left to watch."""
        with self._lock:
            self._closed = True
            self._idle = False
            self._lock.notify()

    def _start(self, commit: _Commit) -> None:
        with self._lock:
            self._running[id(commit)] = commit
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._watch, name="volcano-commit-deadlines", daemon=True
                )
                self._thread.start()
            elif self._idle:
                self._idle = False
                self._lock.notify()

    def _end(self, commit: _Commit) -> bool:
        """Forget `commit`; whether a cancel was sent for it (waiting until it has been)."""
        with self._lock:
            del self._running[id(commit)]
            cancelling = commit.cancelled
        if cancelling is not None:
            cancelling.wait()
        return cancelling is not None

    def _watch(self) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                overdue = [c for c in self._running.values() if c.due(now)]
                for commit in overdue:
                    commit.cancelled = threading.Event()
                if not overdue:
                    if self._closed:
                        return
                    deadlines = [c.deadline for c in self._running.values() if c.cancelled is None]
                    self._idle = not deadlines
                    self._lock.wait(max(0.0, min(deadlines) - now) if deadlines else None)
                    continue
            for commit in overdue:
                commit.cancel()


class _Commit:
    """A COMMIT in flight, for `Commits`."""

    def __init__(self, conn: psycopg.Connection[Any], deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.cancelled: threading.Event | None = None  # set once a cancel is on its way

    def due(self, now: float) -> bool:
        return self.cancelled is None and now >= self.deadline

    def cancel(self) -> None:
        assert self.cancelled is not None  # noqa: S101 - marked by the watcher
        try:
            self.conn.cancel_safe(timeout=_CANCEL_SECONDS)
        except psycopg.Error as exc:  # the database is out of reach: the socket's timeouts end it
            log.warning("cancelling a COMMIT past its deadline failed: %s", exc)
        finally:
            self.cancelled.set()


@attrs.frozen
class Durability:
    """What keeps a commit: the settings of the server's sessions and the standbys streaming."""

    synchronous_commit: str
    fsync: bool
    synchronous_standby_names: str
    in_recovery: bool
    standbys: int
    """Physical standbys streaming from this database."""
    sync_visible: int
    """How many of those show their sync state to this role."""
    synchronous: int
    """How many are synchronous (or in the quorum) now."""


@attrs.frozen
class Verdict:
    """`refusal` (the server must not serve), warnings, and a line saying what was found."""

    refusal: str | None
    warnings: list[str]
    summary: str


def judge(facts: Durability, *, hosts: int) -> Verdict:
    """Whether an acknowledged commit on this database can be lost, as far as it can tell.

    Refused: only what loses acknowledged commits without any failover, whatever the topology
    (`synchronous_commit = off`: a crash of PostgreSQL alone loses the last ones). Warned: what
    loses them only if someone promotes a standby that missed them, or an operating-system
    crash comes, which the server cannot foresee: replicas may be there for reads or backups
    and never be promoted, several hosts may share one disk, a test cluster may skip fsync.
    """
    summary = (
        f"synchronous_commit={facts.synchronous_commit}, synchronous_standby_names="
        f"{facts.synchronous_standby_names!r}, {facts.standbys} standby(s) streaming"
    )
    if facts.in_recovery:
        standby = (
            "the database is a standby (in recovery): every write is answered 503 until it is"
            " promoted; point the URL at the primary, or name every host with"
            " target_session_attrs=read-write"
        )
        return Verdict(None, [standby], summary)
    if facts.synchronous_commit == "off":
        return Verdict(
            "synchronous_commit is off for this server's sessions: PostgreSQL acknowledges a"
            " commit before it is on disk, so a crash loses the last acknowledged leases and"
            " their fencing tokens are issued again. Set it on for the server's role or"
            " database (ALTER ROLE ... SET synchronous_commit = on)",
            [],
            summary,
        )
    warnings = []
    if not facts.fsync:
        warnings.append(
            "fsync is off: an operating-system crash or power loss can lose acknowledged leases"
            " (and corrupt the database), and their fencing tokens are issued again"
        )
    lose = "acknowledged leases, whose fencing tokens are then issued again"
    if not facts.synchronous_standby_names.strip():
        if facts.standbys:
            warnings.append(
                f"asynchronous replication to {facts.standbys} standby(s): a failover to one"
                f" loses the commits it had not received yet, {lose}. Make the standby you"
                " fail over to synchronous (synchronous_standby_names), or never promote these"
            )
        elif hosts > 1:
            warnings.append(
                f"the URL names {hosts} hosts but this primary has no synchronous standby: a"
                f" failover to another host loses the commits it had not received, {lose}"
                " (unless the hosts share one disk)"
            )
    elif facts.synchronous_commit == "local":
        warnings.append(
            "synchronous_commit is local: commits do not wait for the synchronous standby, so a"
            f" failover to it loses the last ones, {lose}. Set it on (or remote_apply)"
        )
    elif facts.sync_visible == facts.standbys and not facts.synchronous:
        warnings.append(
            "no synchronous standby is streaming: every commit waits for one, and writes are"
            " answered 503 until it connects"
        )
    return Verdict(None, warnings, summary)


def check_durability(conn: psycopg.Connection[Any], *, hosts: int) -> None:
    """Judge the database `conn` is on: log the warnings, raise UnsafeDatabase if refused.

    A database that lacks the views read here (one merely compatible with PostgreSQL) or hides
    them from this role is served, with a warning that it could not be judged.
    """
    try:
        with conn.transaction():
            row = conn.execute(_FACTS).fetchone()
    except (psycopg.ProgrammingError, psycopg.NotSupportedError) as exc:
        log.warning("DURABILITY: cannot tell what keeps a commit here: %s", exc)
        return
    assert row is not None  # noqa: S101 - an aggregate returns one row
    verdict = judge(Durability(*row), hosts=hosts)
    if verdict.refusal is not None:
        raise UnsafeDatabase(verdict.refusal)
    for warning in verdict.warnings:
        log.warning("DURABILITY: %s", warning)
    if verdict.warnings or row[4]:
        log.info("database durability: %s", verdict.summary)
