"""The Celery app the framework tests run real workers and beats of.

Broker and result backend: the local Redis (`VOLCANO_TEST_REDIS_URL`, default
redis://127.0.0.1:6379/0). Each test gives its own queue (`VOLCANO_TEST_QUEUE`) and its own
Volcano project (the VOLCANO_* variables), so runs never see each other's messages or locks.
The task bodies record what they did in Redis lists named by the test (`record`), and the
tests read them there.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

from volcano.integrations.celery import LockedTask

REDIS_URL = os.environ.get("VOLCANO_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("VOLCANO_TEST_QUEUE", "volcano-tests")

app = Celery("volcano_tests", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    beat_schedule={
        "tick": {"task": "tests.tick", "schedule": 0.5, "options": {"queue": QUEUE + "-beat"}},
    },
    volcano_beat_election=os.environ.get("VOLCANO_TEST_ELECTION", "celery-beat"),
    volcano_beat_ttl=float(os.environ.get("VOLCANO_TEST_TTL", "10")),
)
store = redis.Redis.from_url(REDIS_URL)


def record(name: str, line: str) -> None:
    """Append `line` to the test's list `name` in Redis."""
    store.rpush(name, line)


def hold_until(flag: str, limit: float = 60.0) -> None:
    """Block until the test sets `flag` in Redis (or `limit` seconds pass)."""
    deadline = time.monotonic() + limit
    while not store.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.02)


def _common(self: LockedTask, log: str, flag: str) -> int:
    token = self.lock.lease.fencing_token
    record(log, f"start {token} {os.getpid()} {self.request.retries}")
    hold_until(flag)
    lost = self.lock.lost
    record(log, f"end {token} {'lost' if lost else 'held'}")
    return token


@app.task(name="tests.skip", base=LockedTask, bind=True, lock_ttl=10)
def skip_task(self: LockedTask, log: str, flag: str) -> int:
    return _common(self, log, flag)


@app.task(
    name="tests.retry", base=LockedTask, bind=True, lock_ttl=3, lock_on_held="retry", max_retries=20
)
def retry_task(self: LockedTask, log: str, flag: str) -> int:
    return _common(self, log, flag)


@app.task(
    name="tests.wait",
    base=LockedTask,
    bind=True,
    lock_ttl=10,
    lock_wait=60,
    lock_key="tests-wait:{log}",
)
def wait_task(self: LockedTask, log: str, flag: str) -> int:
    return _common(self, log, flag)


@app.task(name="tests.short_ttl", base=LockedTask, bind=True, lock_ttl=3)
def short_ttl_task(self: LockedTask, log: str, flag: str) -> int:
    return _common(self, log, flag)


@app.task(name="tests.until_lost", base=LockedTask, bind=True, lock_ttl=3)
def until_lost_task(self: LockedTask, log: str, flag: str) -> int:
    token = self.lock.lease.fencing_token
    record(log, f"start {token} {os.getpid()} {self.request.retries}")
    lost = self.lock.wait_lost(timeout=30)
    record(log, f"end {token} {'lost' if lost else 'held'}")
    return token


@app.task(name="tests.tick")
def tick() -> None:
    """What beat sends; the tests read the messages in the queue, unconsumed."""
