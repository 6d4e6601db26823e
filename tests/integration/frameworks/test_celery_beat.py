"""volcano.integrations.celery's ElectedScheduler in real `celery beat` processes on the local
Redis: one leader dispatches, the others send nothing; the next takes over within the ttl
when the leader is killed with kill -9, and at once when it stops with SIGTERM.

Which beat sent a message is read from the message itself, unconsumed in Redis: Celery puts
the sender's pid in each task message's `origin` header."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import volcano
from tests.conftest import LiveServer
from tests.integration.frameworks.conftest import APPS, Process, figure, python, wait_until
from tests.support.proxy import FaultProxy

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

    def start(name: str, api_url: str | None = None) -> Process:
        argv = python(
            "-m", "celery", "-A", f"{APPS}.celery_app", "beat",
            "-S", "volcano.integrations.celery.ElectedScheduler",
            "-s", str(tmp_path / f"schedule-{name}"), "--pidfile", str(tmp_path / f"{name}.pid"),
            "--loglevel", "INFO",
        )  # fmt: skip
        env = {**child_env, "VOLCANO_TEST_QUEUE": beat_queue, "VOLCANO_TEST_TTL": str(TTL)}
        if api_url is not None:
            env["VOLCANO_API_URL"] = api_url
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
        assert beats[leader].terminate() == 0, beats[leader].output()
        (other,) = set(beats) - {leader}
        wait_until(lambda: other in senders(beat_queue), "the other beat to dispatch")
        figure(
            f"celery beat SIGTERM: the next beat dispatched {time.monotonic() - stopped:.2f}s "
            f"after SIGTERM (ttl {TTL:g} s)"
        )
        assert leader_pid(client) == other

    def test_a_leader_cut_off_from_the_lock_server_stops_before_the_next_starts(
        self, start_beat, beat_queue: str, client: volcano.Client, sqlite_server: LiveServer
    ) -> None:
        """The leader's link to the lock server is cut (a partition, not a crash: it keeps
        running): it stops dispatching when its lease may have run out, before the other
        beat is elected, so no message of the old leader follows one of the new; healed, it
        follows the new leader."""
        with FaultProxy(upstream=sqlite_server.url) as proxy:
            first = start_beat("a", api_url=proxy.url)
            assert leader_pid(client) == first.pid
            second = start_beat("b")
            wait_until(lambda: len(senders(beat_queue)) >= 2, "the leader's ticks")
            cut = time.monotonic()
            proxy.partition()
            wait_until(lambda: second.pid in senders(beat_queue), "the other to lead", TTL + 5)
            figure(
                f"celery beat partition: the other beat dispatched {time.monotonic() - cut:.2f}s "
                f"after the leader was cut off (ttl {TTL:g} s)"
            )
            taken_over = senders(beat_queue).index(second.pid)
            wait_until(lambda: len(senders(beat_queue)) >= taken_over + 4, "more ticks")
            proxy.heal()
            first.wait_for(r"lost the leadership of 'celery-beat'")
            count = len(senders(beat_queue))
            wait_until(lambda: len(senders(beat_queue)) >= count + 4, "ticks after the heal")
        assert set(senders(beat_queue)[taken_over:]) == {second.pid}
        assert set(senders(beat_queue)[:taken_over]) == {first.pid}
        assert leader_pid(client) == second.pid


class TestFollowing:
    def test_a_follower_sends_nothing_keeps_in_step_and_sends_what_fell_due_once_elected(
        self,
        redis_url: str,
        beat_queue: str,
        sqlite_server: LiveServer,
        project,
        client: volcano.Client,
        tmp_path: Path,
    ) -> None:
        """An ElectedScheduler ticking while another candidate leads sends nothing, and counts
        an entry overdue by more than the ttl as sent by the leader; once the leader resigns
        it is elected and sends at once the entry that fell due meanwhile."""
        from celery import Celery

        from volcano.integrations.celery import ElectedScheduler

        app = Celery("following", broker=redis_url, set_as_current=False)
        app.conf.update(
            volcano_api_url=sqlite_server.url,
            volcano_anon_key=project.anon_key,
            volcano_service_key=project.service_key,
            volcano_beat_ttl=1,
            beat_schedule={
                "tick": {
                    "task": "tests.tick",
                    "schedule": 1.0,
                    "options": {"queue": beat_queue + "-beat"},
                }
            },
        )
        with client.elections.campaign("celery-beat", label="another:1", ttl=30):
            scheduler = ElectedScheduler(app=app, schedule_filename=str(tmp_path / "s"))
            try:
                runs = scheduler.schedule["tick"].total_run_count

                def follow() -> bool:
                    scheduler.tick()
                    return scheduler.schedule["tick"].total_run_count > runs

                wait_until(follow, "the entry to be counted as the leader's")
                assert senders(beat_queue) == []
            except BaseException:
                scheduler.close()
                raise
        try:

            def lead() -> bool:
                scheduler.tick()
                return bool(senders(beat_queue))

            wait_until(lead, "the new leader to send")
            assert client.elections.leader("celery-beat").label.endswith(f":{os.getpid()}")
        finally:
            scheduler.close()
