"""with_lock guards whose renewals are cut off by the fault proxy.

The guarantee under test: a guard never reports the lease held after the instant it may have
expired, judged by the client's monotonic clock: the first send of the request that produced
the current lease, plus the ttl (`SendLog.lease_deadline`, from httpx's request hook, which runs
just before the request is written: the server cannot have made the lease earlier). The tests
sample `guard.lost` in a tight loop across that instant, with no slack either way: every sample
whose read began at or after the deadline must say lost, and once a sample says lost, none after
it may say held.

The backend plays no part in this, so these tests run against the SQLite server only.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import volcano
from tests.conftest import LiveServer
from tests.support.proxy import FaultProxy
from tests.support.raw import wait_for
from tests.support.sdk import PATIENCE, LostSamples, Sdk
from volcano._ownership import GuardState, Ownership
from volcano._seam import Success


@pytest.fixture
def target(sqlite_server: LiveServer) -> LiveServer:
    return sqlite_server


def sample_until(sdk: Sdk, guard: Any, instant: float) -> LostSamples:
    """Sample `guard.lost` from now until the monotonic clock passes `instant`."""
    with sdk.sampling(guard) as samples:
        time.sleep(max(0.0, instant - time.monotonic()))
    return samples


def assert_lost_by(samples: LostSamples, deadline: float) -> None:
    """The samples cross `deadline`; none said held from the deadline on; lost stayed lost."""
    assert samples.last_at is not None
    assert samples.last_at >= deadline, "the sampling ended before the deadline"
    assert samples.first_true is not None, "the guard never reported the lease lost"
    if samples.last_false is not None:
        late = samples.last_false - deadline
        assert late < 0, f"the guard still said held {late * 1000:.3f} ms after the deadline"
    assert samples.flips_back == 0, "the guard said held again after saying lost"


def renewals(proxy: FaultProxy) -> list[Any]:
    return [r for r in proxy.requests if r.path.endswith("/renew")]


class TestPartitionLongerThanTtl:
    TTL = 1.0

    def enter_and_partition(self, sdk: Sdk, proxy: FaultProxy, key: str) -> Any:
        """Enter a guard, let one renewal succeed, then cut every connection off."""
        guard = sdk.with_lock(key, ttl=self.TTL)
        sdk.enter(guard)
        wait_for(lambda: len(sdk.log.successes("renew")) >= 1, "a first renewal")
        proxy.partition()
        return guard

    def test_lost_no_later_than_the_lease_can_expire(
        self, sdk: Sdk, proxy: FaultProxy, key: str
    ) -> None:
        """Renewals cut off past the ttl: lost from the moment the lease may have expired by the
        client's clock (last successful send + ttl) on, never held again."""
        guard = self.enter_and_partition(sdk, proxy, key)
        partitioned_at = time.monotonic()
        samples = sample_until(sdk, guard, partitioned_at + self.TTL + 0.3)

        deadline = sdk.log.lease_deadline(self.TTL)
        assert deadline <= partitioned_at + self.TTL
        assert samples.last_false is not None, "the guard was lost before the partition"
        assert_lost_by(samples, deadline)
        reason = sdk.read(lambda: guard.lost_reason)
        assert isinstance(reason, volcano.LockLostError)
        cut_off = [r for r in renewals(proxy) if r.partitioned]
        assert cut_off, "no renewal was attempted during the partition"
        assert all(r.upstream_response is None for r in cut_off)
        sdk.exit(guard)

    def test_after_heal_stays_lost_and_leaves_the_new_holder_alone(
        self, sdk: Sdk, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """After heal() the lost guard renews nothing, stays lost, and exits without releasing
        the lease another owner took meanwhile."""
        guard = self.enter_and_partition(sdk, proxy, key)
        own = sdk.read(lambda: guard.lease)
        assert sdk.wait_lost(guard, PATIENCE)
        proxy.heal()
        healed_at = len(proxy.requests)

        taken: list[volcano.LockLease] = []

        def take() -> bool:
            try:
                taken.append(other.locks.acquire(key, ttl=30))
            except volcano.LockHeldError:
                return False
            return True

        wait_for(take, "the server to let the expired lease go")
        assert taken[0].fencing_token == own.fencing_token + 1
        with sdk.sampling(guard) as samples:
            time.sleep(self.TTL / 2)
        assert (samples.count > 0, samples.last_false) == (True, None)
        sdk.exit(guard)

        assert sdk.read(lambda: guard.lost)
        assert proxy.requests[healed_at:] == []
        assert not any(r.path.endswith("/release") for r in proxy.requests)
        state = other.locks.get(key)
        assert (state.held, state.fencing_token) == (True, taken[0].fencing_token)


class TestSlowRenewals:
    TTL = 1.0

    def test_lost_by_the_deadline_though_the_server_renewed(
        self, sdk: Sdk, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """Renewal answers slower than the time left: the server renews, but the guard, which
        cannot know that, is lost by its deadline and never held again."""
        guard = sdk.with_lock(key, ttl=self.TTL)
        sdk.enter(guard)
        wait_for(lambda: len(sdk.log.successes("renew")) >= 1, "a first renewal")
        proxy.on("POST", r"/renew$").delay_response(PATIENCE, times=None)
        samples = sample_until(sdk, guard, time.monotonic() + self.TTL + 0.3)

        assert samples.last_false is not None, "the guard was lost before the answers slowed"
        assert_lost_by(samples, sdk.log.lease_deadline(self.TTL))
        slowed = [r for r in renewals(proxy) if r.action == "delay_response"]
        assert slowed, "no renewal was attempted with slow answers"
        assert all(r.upstream_status == 200 for r in slowed)
        state = other.locks.get(key)
        assert state.expires_at is not None
        assert state.expires_at > sdk.read(lambda: guard.lease).expires_at
        sdk.exit(guard)
        assert not any(r.path.endswith("/release") for r in proxy.requests)


class TestPartitionShorterThanTtl:
    TTL = 3.0

    def test_renewal_retries_bridge_the_partition(
        self, sdk: Sdk, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """A partition that swallows a renewal but ends well within the ttl: the renewal is
        retried after heal() and succeeds; the guard is never lost and releases on exit."""
        guard = sdk.with_lock(key, ttl=self.TTL)
        sdk.enter(guard)
        with sdk.sampling(guard) as samples:
            wait_for(lambda: len(sdk.log.successes("renew")) >= 1, "a first renewal")
            threatened = sdk.log.lease_deadline(self.TTL)
            proxy.partition()
            proxy.wait_until(
                lambda records: any(r.partitioned and r.path.endswith("/renew") for r in records),
                PATIENCE,
                "a renewal held by the partition",
            )
            proxy.heal()
            wait_for(lambda: len(sdk.log.successes("renew")) >= 2, "a renewal after heal()")
            time.sleep(max(0.0, threatened - time.monotonic()) + 0.1)
        assert samples.last_at is not None
        assert samples.last_at > threatened, "the sampling ended before the old deadline"
        assert samples.first_true is None, "the guard reported the lease lost"
        assert sdk.read(lambda: guard.lost_reason) is None
        lease = sdk.read(lambda: guard.lease)
        sdk.exit(guard)

        assert not sdk.read(lambda: guard.lost)
        [release] = [r for r in proxy.requests if r.path.endswith("/release")]
        assert release.upstream_status == 204
        state = other.locks.get(key)
        assert (state.held, state.fencing_token) == (False, lease.fencing_token)


class TestAcquisitionAge:
    """The lease a guard enters with dates from the first send of the request that made it."""

    TTL = 1.0
    TIMEOUT = 0.5

    def test_deadline_counts_from_the_first_attempt(
        self, make_sdk: Any, proxy: FaultProxy, key: str
    ) -> None:
        """An acquire whose first answer is slower than the timeout, retried and replayed: the
        lease dates from the first attempt, so the guard (renewals blackholed) is lost by the
        first attempt's send + ttl, not the retry's."""
        sdk = make_sdk(timeout=self.TIMEOUT)
        proxy.on("POST", r"/acquire$").delay_response(self.TTL * 0.8)
        proxy.on("POST", r"/renew$").blackhole(times=None)
        guard = sdk.with_lock(key, ttl=self.TTL)
        sdk.enter(guard)
        first, retry = (r for r in proxy.requests if r.path.endswith("/acquire"))
        assert first.upstream_status == 200
        assert retry.upstream_response is not None
        assert retry.upstream_response.header("Idempotent-Replayed") == "true"

        deadline = sdk.log.lease_deadline(self.TTL)
        retry_sent = max(s.at for s in sdk.log.sent if s.operation == "acquire")
        samples = sample_until(sdk, guard, retry_sent + self.TTL + 0.2)
        assert_lost_by(samples, deadline)
        sdk.exit(guard)

    def test_recovery_with_the_same_ids_dates_the_lease_from_the_lost_attempt(
        self, sdk: Sdk, proxy: FaultProxy, key: str
    ) -> None:
        """with_lock(token=, request_id=) recovering an acquisition whose answers were lost: the
        replayed lease dates from the lost attempt, so with renewals cut off the guard is lost
        by then + ttl, not by the recovery's send + ttl."""
        ttl = 1.5
        owner, request_id = str(uuid.uuid4()), str(uuid.uuid4())
        proxy.on("POST", r"/acquire$").drop_response(times=2)
        with pytest.raises(volcano.APIConnectionError):
            sdk.acquire(key, ttl=ttl, token=owner, request_id=request_id)
        time.sleep(ttl * 0.3)  # the recovery comes a while later, the lease still live

        guard = sdk.with_lock(key, ttl=ttl, token=owner, request_id=request_id)
        sdk.enter(guard)
        entered_at = time.monotonic()
        proxy.partition()
        assert sdk.read(lambda: guard.lease).fencing_token == 1
        samples = sample_until(sdk, guard, entered_at + ttl + 0.2)
        assert_lost_by(samples, sdk.log.lease_deadline(ttl))
        sdk.exit(guard)

    def test_recovering_an_expired_lease_does_not_enter(
        self, sdk: Sdk, proxy: FaultProxy, other: volcano.Client, key: str
    ) -> None:
        """with_lock(token=, request_id=) after the lease the lost attempt made has expired and
        been taken: the replayed answer is not believed; entering raises LeaseNotHeldError."""
        ttl = 0.5
        owner, request_id = str(uuid.uuid4()), str(uuid.uuid4())
        proxy.on("POST", r"/acquire$").drop_response(times=2)
        with pytest.raises(volcano.APIConnectionError):
            sdk.acquire(key, ttl=ttl, token=owner, request_id=request_id)
        taken: list[volcano.LockLease] = []

        def take() -> bool:
            try:
                taken.append(other.locks.acquire(key, ttl=30))
            except volcano.LockHeldError:
                return False
            return True

        wait_for(take, "the first lease to expire")
        guard = sdk.with_lock(key, ttl=ttl, token=owner, request_id=request_id)
        with pytest.raises(volcano.LeaseNotHeldError):
            sdk.enter(guard)
        assert not any(r.path.endswith("/release") for r in proxy.requests)
        state = other.locks.get(key)
        assert (state.held, state.fencing_token) == (True, taken[0].fencing_token)


class TestOneSlowRenewal:
    SLOW_TTL = 6.0
    """The slow key's first renewal goes out after 2 s and may wait 4 s for its answer."""
    FAST_TTL = 0.6
    """The other key is renewed every 0.2 s."""

    def test_does_not_delay_another_guards_renewals(
        self, sdk: Sdk, proxy: FaultProxy, key: str
    ) -> None:
        """One key's renewal request gets no answer: another guard of the same client is renewed
        on schedule meanwhile, again and again, while the slow one is still waiting. (The other
        guard enters once the slow request is out, so that none of its renewals rides in it:
        renewals due together share a request, and its fate.)"""
        slow_key, fast_key = f"{key}-slow", f"{key}-fast"
        proxy.on("POST", rf"/{slow_key}/renew$").blackhole(times=None)
        slow = sdk.with_lock(slow_key, ttl=self.SLOW_TTL)
        fast = sdk.with_lock(fast_key, ttl=self.FAST_TTL)
        sdk.enter(slow)

        def slow_renewal(records: list[Any]) -> Any:
            return next((r for r in records if r.path.endswith(f"/{slow_key}/renew")), None)

        waiting = slow_renewal(proxy.wait_until(slow_renewal, PATIENCE, "the slow renewal"))
        sdk.enter(fast)

        def fast_renewals_since() -> list[Any]:
            return [
                r
                for r in proxy.requests
                if r.seq > waiting.seq
                and r.path.endswith(f"/{fast_key}/renew")
                and r.client_status == 200
            ]

        wait_for(lambda: len(fast_renewals_since()) >= 3, "renewals of the other key")
        assert waiting.outcome == "held", "the slow renewal was answered or gave up first"
        assert not sdk.read(lambda: fast.lost)
        proxy.release_held()
        sdk.exit(fast)
        sdk.exit(slow)


class Calls:
    """What a guard's callbacks were called with, and on which thread."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, volcano.Error, str]] = []
        self._lock = threading.Lock()

    def callback(self, name: str) -> Callable[[volcano.Error], None]:
        def record(reason: volcano.Error) -> None:
            with self._lock:
                self.seen.append((name, reason, threading.current_thread().name))

        return record

    def names(self) -> list[str]:
        with self._lock:
            return [name for name, _, _ in self.seen]


LOOP_THREADS = {"sync": "volcano-renew", "async": "sdk-async-loop"}
"""Where the renewal loop runs: the client's loop and sender threads (volcano-renewer,
volcano-renewal-N), or the event loop's thread."""


class TestStatesAndCallbacks:
    TTL = 1.5
    MARGIN = 0.6

    def test_cut_off_goes_at_risk_then_lost_and_calls_back_once_each(
        self, sdk: Sdk, proxy: FaultProxy, key: str
    ) -> None:
        """Renewals cut off: the guard turns at risk (on_at_risk gets the unanswered renewal as
        an APITimeoutError), then lost (on_lost gets lost_reason), each callback once and from
        the renewal loop; check() then raises LockLostError caused by lost_reason."""
        calls = Calls()
        guard = sdk.with_lock(
            key,
            ttl=self.TTL,
            at_risk_margin=self.MARGIN,
            on_lost=calls.callback("on_lost"),
            on_at_risk=calls.callback("on_at_risk"),
        )
        sdk.enter(guard)
        wait_for(lambda: len(sdk.log.successes("renew")) >= 1, "a first renewal")
        assert sdk.read(lambda: guard.state) is volcano.GuardState.HELD
        proxy.partition()
        wait_for(lambda: calls.names() == ["on_at_risk"], "the at-risk callback")
        assert sdk.read(lambda: guard.state) is volcano.GuardState.AT_RISK
        assert sdk.wait_lost(guard, PATIENCE)
        wait_for(lambda: calls.names() == ["on_at_risk", "on_lost"], "the lost callback")
        (_, at_risk, where), (_, lost, where_lost) = calls.seen
        assert isinstance(at_risk, volcano.APITimeoutError)
        assert "has had no answer" in str(at_risk)
        assert lost is sdk.read(lambda: guard.lost_reason)
        assert isinstance(lost, volcano.LockLostError)
        assert where.startswith(LOOP_THREADS[sdk.kind])
        assert where_lost.startswith(LOOP_THREADS[sdk.kind])
        with pytest.raises(volcano.LockLostError) as raised:
            sdk.read(guard.check)
        assert raised.value.__cause__ is lost
        proxy.heal()
        sdk.exit(guard)
        assert calls.names() == ["on_at_risk", "on_lost"]

    def test_takeover_calls_on_lost_with_the_refusal(
        self, sdk: Sdk, other: volcano.Client, key: str
    ) -> None:
        """A force release mid-block: the next renewal is refused, on_lost gets the
        LeaseNotHeldError once, the lease was never at risk, and exit sends no release."""
        calls = Calls()
        guard = sdk.with_lock(
            key, ttl=self.TTL, on_lost=calls.callback("on_lost"), on_at_risk=calls.callback("x")
        )
        sdk.enter(guard)
        other.locks.force_release(key)
        assert sdk.wait_lost(guard, PATIENCE)
        wait_for(lambda: calls.names() == ["on_lost"], "the lost callback")
        assert isinstance(calls.seen[0][1], volcano.LeaseNotHeldError)
        sdk.exit(guard)
        assert not any(s.operation == "release" for s in sdk.log.sent)
        assert calls.names() == ["on_lost"]

    def test_a_raising_callback_is_logged_and_the_loop_goes_on(
        self, sdk: Sdk, other: volcano.Client, key: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """on_lost raises: the exception is logged with its traceback, and the same loop goes
        on renewing the client's other guard."""

        def broken(reason: volcano.Error) -> None:
            raise RuntimeError("a bug in the callback")

        doomed = sdk.with_lock(f"{key}-doomed", ttl=self.TTL, on_lost=broken)
        kept = sdk.with_lock(f"{key}-kept", ttl=self.TTL)
        sdk.enter(doomed)
        sdk.enter(kept)
        other.locks.force_release(f"{key}-doomed")
        assert sdk.wait_lost(doomed, PATIENCE)
        wait_for(
            lambda: any("on_lost callback" in r.getMessage() for r in caplog.records),
            "the callback's exception in the log",
        )
        (record,) = [r for r in caplog.records if "on_lost callback" in r.getMessage()]
        assert record.exc_info is not None
        renewed = len(sdk.log.successes("renew"))
        wait_for(lambda: len(sdk.log.successes("renew")) >= renewed + 2, "more renewals")
        assert sdk.read(lambda: kept.state) is volcano.GuardState.HELD
        sdk.exit(kept)
        sdk.exit(doomed)


class TestLostIsFinal:
    def test_a_renewal_landing_while_lost_is_judged_never_flips_it_back(self) -> None:
        """A renewal answer landing between two judgements of a lease past its deadline: the
        guard never answers lost and then held.

        The window is a few bytecodes wide, so no network fault can aim at it; the renewal is
        made to land there by handing it to the guard's state machine between the two reads."""
        lease = volcano.LockLease(
            key="k",
            owner_token=str(uuid.uuid4()),
            fencing_token=1,
            expires_at=datetime.now(UTC),
            ttl_seconds=1,
        )
        ownership = Ownership(
            "k", timeout=5.0, margin=None, on_lost=None, on_at_risk=None, wake=lambda: None
        )
        ownership.enter()
        ownership.acquired(Success(lease, 0.0, replayed=False))
        answers = [ownership.state(1.001) is GuardState.LOST]
        ownership.renewed(Success(lease, 0.99, replayed=False), 1.0015)
        answers.append(ownership.state(1.002) is GuardState.LOST)
        assert answers in ([False, False], [True, True])
