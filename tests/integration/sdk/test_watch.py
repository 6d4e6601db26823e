"""client.locks.watch, client.locks.list and labels, with both clients, against the real server.

Changes are made by `server` (another party speaking raw HTTP), so the watch hears of them only
through its long polls; faults come from the `wire` (refused connections, lost answers).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import volcano
from tests.support.raw import Locks, new_id, wait_for
from tests.support.sdk import Sdk


def hold(server: Locks, key: str, *, ttl: float = 30, label: str | None = None) -> dict[str, Any]:
    """A lease taken by the other party, with `label`."""
    body: dict[str, Any] = {"owner_token": new_id(), "ttl_seconds": ttl}
    if label is not None:
        body["label"] = label
    response = server.http.post(f"/v1/locks/{key}/acquire", json=body)
    assert response.status_code == 200, response.text
    lease: dict[str, Any] = response.json()
    return lease


class TestLabels:
    def test_acquire_renew_and_with_lock_carry_labels(self, sdk: Sdk, key: str) -> None:
        """A label given to acquire shows in holders; renew keeps it, or replaces it; a
        with_lock guard's label stays through its renewals."""
        lease = sdk.acquire(key, ttl=30, label="host-a:1")
        assert [h.label for h in sdk.get(key).holders] == ["host-a:1"]
        lease = sdk.renew(key, lease)
        assert [h.label for h in sdk.get(key).holders] == ["host-a:1"]
        sdk.renew(key, lease, label="host-a:2")
        assert [h.label for h in sdk.get(key).holders] == ["host-a:2"]
        sdk.release(key, lease)
        with sdk.lock(key, ttl=30, label="guarded") as guard:
            sdk.renew(key, guard.lease)
            assert [h.label for h in sdk.get(key).holders] == ["guarded"]

    @pytest.mark.parametrize("label", ["é", "line\nbreak", "x" * 201, 7])
    def test_a_bad_label_is_refused_before_sending(self, sdk: Sdk, key: str, label: Any) -> None:
        """A label outside 0 to 200 printable ASCII characters: InvalidArgumentError naming it,
        and nothing sent."""
        with pytest.raises(volcano.InvalidArgumentError, match="label"):
            sdk.acquire(key, ttl=30, label=label)
        assert sdk.log.sent == []


class TestWatch:
    def test_the_state_now_then_each_change(self, sdk: Sdk, server: Locks, key: str) -> None:
        """The first state is the key's now; then a grant, a relabel, a release, an expiry
        (no request made) and a force release each come as one state, versions rising."""
        states = sdk.watch(key)
        try:
            first = states.next()
            assert (first.version, first.held) == (0, False)
            lease = hold(server, key, label="a")
            assert [h.label for h in states.next().holders] == ["a"]
            body = {"owner_token": lease["owner_token"], "fencing_token": lease["fencing_token"]}
            renewed = server.http.post(
                f"/v1/locks/{key}/renew", json={**body, "ttl_seconds": 30, "label": "b"}
            )
            assert renewed.status_code == 200
            assert [h.label for h in states.next().holders] == ["b"]
            assert server.release(key, lease["owner_token"], lease["fencing_token"]).is_success
            assert states.next().held is False
            hold(server, key, ttl=1)
            assert states.next().held is True
            assert states.next().held is False  # expired: the server's timer answered the poll
            hold(server, key)
            assert states.next().held is True
            server.force_release(key)
            last = states.next()
            assert (last.held, last.version) == (False, 7)
        finally:
            states.close()

    def test_after_version_skips_what_was_seen(self, sdk: Sdk, server: Locks, key: str) -> None:
        """Watching after the current version starts with the next change, not the state now."""
        hold(server, key)
        states = sdk.watch(key, after_version=sdk.get(key).version)
        try:
            server.force_release(key)
            assert states.next().version == 2
            assert states.iterator.version == 2
        finally:
            states.close()

    def test_changes_faster_than_polls_end_on_the_latest(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """While 30 changes race the watch, its versions only rise, and it ends on the last."""
        states = sdk.watch(key)
        try:
            seen = [states.next().version]
            done = threading.Event()

            def churn() -> None:
                for _ in range(15):
                    lease = hold(server, key)
                    server.release(key, lease["owner_token"], lease["fencing_token"])
                done.set()

            thread = threading.Thread(target=churn, daemon=True)
            thread.start()
            while seen[-1] != 30:
                seen.append(states.next().version)
            thread.join(10)
            assert done.is_set()
            assert seen == sorted(set(seen))
            assert sdk.get(key).version == 30
        finally:
            states.close()

    def test_resumes_after_transport_failures(
        self, sdk: Sdk, server: Locks, wire: Any, key: str
    ) -> None:
        """Refused connections and a lost answer are retried from the last version: the
        change made meanwhile still comes, once."""
        states = sdk.watch(key)
        try:
            assert states.next().version == 0
            before = len(wire.of("get"))
            wire.refuse.add("get")
            result: list[volcano.LockState] = []
            reader = threading.Thread(target=lambda: result.append(states.next()), daemon=True)
            reader.start()
            wait_for(lambda: len(wire.of("get")) >= before + 3, "three refused polls")
            hold(server, key)
            wire.lose.append("get")
            wire.refuse.discard("get")
            reader.join(20)
            assert [state.version for state in result] == [1]
        finally:
            states.close()

    def test_a_final_error_ends_the_watch(self, make_sdk: Any, key: str) -> None:
        """A refusal that retrying cannot change (a wrong service key: 401) is raised."""
        sdk = make_sdk(service_key="vk_local_" + "0" * 43)
        states = sdk.watch(key)
        with pytest.raises(volcano.AuthenticationError):
            states.next()

    def test_closing_ends_the_iteration(self, sdk: Sdk, key: str) -> None:
        """After close(), the iteration ends."""
        states = sdk.watch(key)
        states.next()
        states.close()
        with pytest.raises((StopIteration, StopAsyncIteration)):
            states.next()

    def test_a_bad_argument_is_refused_before_sending(self, sdk: Sdk) -> None:
        """A bad key or after_version: InvalidArgumentError naming it, nothing sent."""
        with pytest.raises(volcano.InvalidArgumentError, match="key"):
            sdk.watch("no/slashes")
        with pytest.raises(volcano.InvalidArgumentError, match="after_version"):
            sdk.watch("k", after_version=-1)
        assert sdk.log.sent == []


@pytest.mark.anyio
class TestAsyncWatch:
    async def test_aclose_cancels_the_poll_under_way(
        self, aclient: volcano.AsyncClient, key: str
    ) -> None:
        """aclose() from another task ends a watch waiting in a poll at once."""
        import asyncio

        async with aclient.locks.watch(key) as states:
            await states.__anext__()
            waiting = asyncio.ensure_future(states.__anext__())
            await asyncio.sleep(0.2)
            assert not waiting.done()
            await states.aclose()
            with pytest.raises(StopAsyncIteration):
                await asyncio.wait_for(waiting, 5)

    async def test_cancelling_the_reader_cancels_its_poll(
        self, aclient: volcano.AsyncClient, key: str
    ) -> None:
        """Cancelling the task reading a watch raises CancelledError there, and the watch can
        go on afterwards."""
        import asyncio

        states = aclient.locks.watch(key)
        await states.__anext__()
        reading = asyncio.ensure_future(states.__anext__())
        await asyncio.sleep(0.2)
        reading.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reading
        await aclient.locks.acquire(key, ttl=30)
        assert (await asyncio.wait_for(states.__anext__(), 10)).held is True
        await states.aclose()


class TestList:
    def test_every_page_in_key_order(self, sdk: Sdk, server: Locks, key: str) -> None:
        """Seven held keys under a prefix, pages of two: all seven, in order, with state."""
        names = sorted(f"{key}-{index}" for index in range(7))
        for name in reversed(names):
            hold(server, name, label=name[-1])
        states = sdk.listed(key, page_size=2)
        assert [state.key for state in states] == names
        assert [state.holders[0].label for state in states] == [name[-1] for name in names]
        assert len([s for s in sdk.log.sent if s.operation == "get"]) == 4

    def test_nothing_listed(self, sdk: Sdk, key: str) -> None:
        """A prefix nothing is held under: an empty iteration after one request."""
        assert sdk.listed(key) == []

    def test_bad_arguments_are_refused_before_sending(self, sdk: Sdk) -> None:
        """A prefix with other characters, or a page size outside 1..500: InvalidArgumentError."""
        with pytest.raises(volcano.InvalidArgumentError, match="prefix"):
            sdk.listed("a/b")
        with pytest.raises(volcano.InvalidArgumentError, match="page_size"):
            sdk.listed("", page_size=501)
        assert sdk.log.sent == []


class TestHolders:
    def test_every_holder_beyond_those_a_state_shows(
        self, sdk: Sdk, server: Locks, key: str
    ) -> None:
        """A semaphore of 25 holders: its state shows the 20 ending soonest and counts 25;
        holders() pages through all 25, in fencing token order, with their labels."""
        tokens = []
        for index in range(25):
            body = {"owner_token": new_id(), "ttl_seconds": 30 + index, "limit": 25}
            body["label"] = f"w{index}"
            lease = server.http.post(f"/v1/locks/{key}/acquire", json=body)
            assert lease.status_code == 200, lease.text
            tokens.append(lease.json()["fencing_token"])
        state = sdk.get(key)
        assert (len(state.holders), state.holder_count) == (20, 25)
        assert [h.label for h in state.holders] == [f"w{index}" for index in range(20)]
        holders = sdk.holders(key, page_size=7)
        assert [h.fencing_token for h in holders] == tokens
        assert [h.label for h in holders] == [f"w{index}" for index in range(25)]
        assert len([s for s in sdk.log.sent if s.operation == "get"]) == 5  # the state, 4 pages

    def test_a_free_key_has_none(self, sdk: Sdk, key: str) -> None:
        """A key never held: no holders, after one request."""
        assert sdk.holders(key) == []
        assert sdk.get(key).holder_count == 0

    def test_bad_arguments_are_refused_before_sending(self, sdk: Sdk) -> None:
        """A malformed key, or a page size outside 1..100: InvalidArgumentError."""
        with pytest.raises(volcano.InvalidArgumentError, match="key"):
            sdk.holders("a/b")
        with pytest.raises(volcano.InvalidArgumentError, match="page_size"):
            sdk.holders("k", page_size=101)
        assert sdk.log.sent == []
