"""volcano.integrations.celery's ElectedScheduler in real `celery beat` processes on the local
Redis: one leader dispatches, the others send nothing; the next takes over within the ttl
when the leader is killed with kill -9, and at once when it stops with SIGTERM.

Which beat sent a message is read from the message itself, unconsumed in Redis: Celery puts
the sender's pid in each task message's `origin` header."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import volcano
from tests.integration.frameworks.conftest import APPS, Process, figure, python, wait_until

pytestmark = pytest.mark.slow

TTL = 3.0


@pytest.fixture
def beat_queue(redis_url: str) -> Iterator[str]:
    from tests.integration.frameworks.apps import celery_app

    name = f"volcano-tests-{uuid.uuid4().hex[:12]}"
    yield name
    celery_app.store.delete(name + "-beat")


@pytest.fixture
def start_beat(
    spawn: Callable[..., Process], child_env: dict[str, str], beat_queue: str, tmp_path: Path
) -> Callable[[str], Process]:
    """A real `celery beat` with the ElectedScheduler, a schedule file of its own."""

    def start(name: str) -> Process:
        argv = python(
            "-m", "celery", "-A", f"{APPS}.celery_app", "beat",
            "-S", "volcano.integrations.celery.ElectedScheduler",
            "-s", str(tmp_path / f"schedule-{name}"), "--pidfile", str(tmp_path / f"{name}.pid"),
            "--loglevel", "INFO",
        )  # fmt: skip
        env = {**child_env, "VOLCANO_TEST_QUEUE": beat_queue, "VOLCANO_TEST_TTL": str(TTL)}
        beat = spawn(f"beat-{name}", argv, env)
        beat.wait_for(r"beat: Starting")
        return beat

    return start


def senders(beat_queue: str) -> list[int]:
    """The pid of the beat that sent each message in the queue, oldest first."""
    from tests.integration.frameworks.apps import celery_app

    raw = celery_app.store.lrange(beat_queue + "-beat", 0, -1)  # LPUSHed: newest first
    origins = [json.loads(message)["headers"]["origin"] for message in reversed(raw)]
    return [int(re.fullmatch(r"gen(\d+)@.*", origin).group(1)) for origin in origins]


def leader_pid(client: volcano.Client) -> int:
    leader = wait_until(lambda: client.elections.leader("celery-beat"), "a leader")
    assert isinstance(leader, volcano.Leader)
    assert leader.label is not None
    return int(leader.label.rsplit(":", 1)[1])


class TestElectedScheduler:
    def test_only_the_leader_dispatches_and_the_next_takes_over_after_kill_9(
        self, start_beat, beat_queue: str, client: volcano.Client
    ) -> None:
        """Two beats: every message comes from the elected one; after its kill -9 the other
        dispatches within the ttl (+5 s), and the dead one's messages stop."""
        beats = {beat.pid: beat for beat in (start_beat("a"), start_beat("b"))}
        leader = leader_pid(client)
        wait_until(lambda: len(senders(beat_queue)) >= 4, "the leader's ticks")
        assert set(senders(beat_queue)) == {leader}
        before = len(senders(beat_queue))
        killed = time.monotonic()
        beats[leader].kill()
        (other,) = set(beats) - {leader}
        wait_until(
            lambda: other in senders(beat_queue), "the other beat to dispatch", timeout=TTL + 5
        )
        figure(
            f"celery beat kill -9: the next beat dispatched {time.monotonic() - killed:.2f}s "
            f"after the kill (ttl {TTL:g} s, schedule every 0.5 s)"
        )
        after = senders(beat_queue)[before:]
        assert after[-1] == other
        assert set(after) <= {leader, other}
        assert beats[other].output().count("elected leader") == 1

    def test_a_leader_stopped_with_sigterm_resigns_and_the_next_leads_at_once(
        self, start_beat, beat_queue: str, client: volcano.Client
    ) -> None:
        """SIGTERM to the leading beat: it resigns on its way out, and the next beat leads and
        dispatches without waiting for the lease to run out."""
        beats = {beat.pid: beat for beat in (start_beat("a"), start_beat("b"))}
        leader = leader_pid(client)
        wait_until(lambda: len(senders(beat_queue)) >= 2, "the leader's ticks")
        stopped = time.monotonic()
        assert beats[leader].terminate() == 0
        (other,) = set(beats) - {leader}
        wait_until(lambda: other in senders(beat_queue), "the other beat to dispatch")
        figure(
            f"celery beat SIGTERM: the next beat dispatched {time.monotonic() - stopped:.2f}s "
            f"after SIGTERM (ttl {TTL:g} s)"
        )
        assert leader_pid(client) == other
