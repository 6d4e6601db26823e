"""The seed's walkthrough, section by section, in Python, then each task of the README's guide:
waiting for a lock, a semaphore, watching a key, listing keys, electing a leader.

Run it with `scripts/walkthrough.sh`, which starts a local reference server and sets
VOLCANO_ANON_KEY, VOLCANO_SERVICE_KEY and VOLCANO_API_URL; or aim it at any Volcano server by
setting those three yourself.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from datetime import timedelta

import volcano


def step(title: str) -> None:
    print(f"\n== {title}")


def distributed_locks(client: volcano.Client) -> None:
    step("Distributed locks: acquire, do the work, release")
    lease = client.locks.acquire("daily-report", ttl=30)
    try:
        print(f"Lease acquired {lease.fencing_token}")
        print(f"  {lease!r}")  # the owner token is redacted in reprs
    finally:
        client.locks.release("daily-report", lease)
        print("  released")

    step("A competing owner gets ConflictError")
    holder = client.locks.acquire("daily-report", ttl=30)
    try:
        client.locks.acquire("daily-report", ttl=30)
    except volcano.ConflictError as error:
        print(f"  {type(error).__name__}: {error.code}, retry after {error.retry_after}s")
    finally:
        client.locks.release("daily-report", holder)


def renew_or_inspect(client: volcano.Client) -> None:
    step("Renew or inspect a lease")
    state = client.locks.get("daily-report")
    print(f"  get: held={state.held} expires_at={state.expires_at}")
    print(f"       fencing_token={state.fencing_token}")

    lease = client.locks.acquire("daily-report", ttl=30)
    try:
        renewed = client.locks.renew("daily-report", lease, ttl=60)
        print(
            f"  renewed fencing token {renewed.fencing_token}: expires {lease.expires_at:%H:%M:%S}"
            f" -> {renewed.expires_at:%H:%M:%S} (the old lease object is unchanged)"
        )
        lease = renewed  # renew returns a new immutable lease: keep it
    finally:
        client.locks.release("daily-report", lease)
    state = client.locks.get("daily-report")
    print(f"  after release: held={state.held} fencing_token={state.fencing_token}")


def renew_for_a_block(client: volcano.Client) -> None:
    step("Renew for the duration of a block")
    with client.locks.with_lock("daily-report", ttl=30) as guard:
        print(f"Current fence {guard.lease.fencing_token}")
        if guard.lost:
            raise RuntimeError("Lock ownership was lost")
        print(f"  wait_lost(timeout=1.0) -> {guard.wait_lost(timeout=1.0)} (still held)")
    print(f"  released on exit: held={client.locks.get('daily-report').held}")


def recover_abandoned(client: volcano.Client) -> None:
    step("Recover an abandoned lock")
    abandoned = client.locks.acquire("daily-report", ttl=3600)  # a worker that died holding it
    print(f"  a crashed worker left fencing token {abandoned.fencing_token} held for an hour")
    result = client.locks.force_release("daily-report")
    print(f"  force_release: released={result.released} fencing_token={result.fencing_token}")
    print("  (only with fencing enforced by the protected resource: the old worker may still run)")


def recover_uncertain(client: volcano.Client) -> None:
    step("Recover an uncertain acquisition")
    owner_token = str(uuid.uuid4()).upper()  # kept exactly as spelled, upper case included
    request_id = str(uuid.uuid4())
    lease = client.locks.acquire("daily-report", ttl=30, token=owner_token, request_id=request_id)
    print(f"  acquired fencing token {lease.fencing_token} with our own token and request id")
    # Suppose that answer had been lost: the same identifiers recover exactly that lease.
    again = client.locks.acquire("daily-report", ttl=30, token=owner_token, request_id=request_id)
    print(
        f"  the same call again returns fencing token {again.fencing_token}:"
        f" same lease = {again.fencing_token == lease.fencing_token}"
    )
    client.locks.release("daily-report", again)
    print("  released; a new lease needs a new owner token")


async def async_client() -> None:
    step("The same surface, awaited: volcano.AsyncClient")
    async with (
        volcano.AsyncClient() as aclient,
        aclient.locks.with_lock("daily-report", ttl=30) as guard,
    ):
        print(f"  async guard holds fencing token {guard.lease.fencing_token}")
        print(f"  await wait_lost(timeout=1.0) -> {await guard.wait_lost(timeout=1.0)}")


def waiting(client: volcano.Client) -> None:
    step("Waiting for a lock: wait= queues on the server instead of failing at once")
    holder = client.locks.acquire("nightly-build", ttl=1)  # another owner, for 1 s
    print(f"  another owner holds nightly-build (fencing token {holder.fencing_token}) for 1 s")
    started = time.monotonic()
    lease = client.locks.acquire("nightly-build", ttl=30, wait=timedelta(seconds=10))
    print(
        f"  handed over when that lease ran out, after {time.monotonic() - started:.1f} s:"
        f" fencing token {lease.fencing_token}"
    )
    try:
        client.locks.acquire("nightly-build", ttl=30)  # wait=0, the default: no waiting
    except volcano.LockHeldError as error:
        print(f"  without wait=, LockHeldError at once; free in at most {error.retry_after} s")
    finally:
        client.locks.release("nightly-build", lease)


def semaphore(client: volcano.Client) -> None:
    step("Limit concurrency: a key with limit=3 is a semaphore of three slots")
    slots = [client.locks.acquire("render-farm", ttl=30, limit=3) for _ in range(3)]
    state = client.locks.get("render-farm")
    print(
        f"  holders' fencing tokens {[h.fencing_token for h in state.holders]}, limit {state.limit}"
    )
    try:
        client.locks.acquire("render-farm", ttl=30, limit=3)
    except volcano.LockHeldError:
        print("  a fourth: LockHeldError, all 3 slots are held")
    client.locks.release("render-farm", slots[0])
    with client.locks.with_lock("render-farm", ttl=30, limit=3, wait=10) as guard:
        print(f"  a freed slot taken with with_lock: fencing token {guard.lease.fencing_token}")
        live = client.locks.check("render-farm", guard.lease.fencing_token)
        print(f"  its lease is live by the fence check: {live}")
    removed = client.locks.force_release("render-farm").released_count
    print(f"  force_release removed {removed} holders")


def watch_and_list(client: volcano.Client) -> None:
    step("Watch a key: its state now, then one state per change")

    def take_turns() -> None:
        lease = client.locks.acquire("nightly-build", ttl=30, label="builder-1")
        client.locks.renew("nightly-build", lease, label="builder-1:step-2")
        client.locks.release("nightly-build", lease)

    with client.locks.watch("nightly-build") as states:
        print(f"  now: version {next(states).version}")
        threading.Thread(target=take_turns).start()
        for state in states:
            labels = [holder.label for holder in state.holders]
            print(f"  version {state.version}: held={state.held} labels={labels}")
            if not state.held:
                break

    step("List keys: every key held or waited for, in key order")
    leases = [client.locks.acquire(f"shard-{n}", ttl=30, label=f"worker-{n}") for n in range(3)]
    for state in client.locks.list("shard-"):
        print(f"  {state.key}: held by {state.holders[0].label}, {state.waiters} waiting")
    for number, lease in enumerate(leases):
        client.locks.release(f"shard-{number}", lease)


def election(client: volcano.Client) -> None:
    step("Elect a leader: campaign, lead, resign; the next candidate takes over")
    with client.elections.campaign("scheduler", label="worker-1", ttl=10) as leadership:
        print(f"  worker-1 leads in term {leadership.term}")
        print(f"  leader: {client.elections.leader('scheduler')}")
        leadership.proclaim("worker-1:8080")
        print(f"  after proclaim: {client.elections.leader('scheduler')}")

        def second_candidate() -> None:
            with client.elections.campaign("scheduler", label="worker-2", ttl=10) as second:
                print(f"  worker-2 took over in term {second.term}")

        waiting_candidate = threading.Thread(target=second_candidate)
        waiting_candidate.start()
        while client.locks.get("scheduler").waiters == 0:  # until worker-2 is in line
            time.sleep(0.01)
        print("  worker-2 waits in line; worker-1 resigns")
    waiting_candidate.join()
    print(f"  after both resigned, the office is vacant: {client.elections.leader('scheduler')}")


def main() -> None:
    client = volcano.Client(
        anon_key=os.environ["VOLCANO_ANON_KEY"],
        service_key=os.environ["VOLCANO_SERVICE_KEY"],
        api_url=os.environ.get("VOLCANO_API_URL", "https://api.volcano.dev"),
    )
    with client:
        print(f"Using {client!r}")
        distributed_locks(client)
        renew_or_inspect(client)
        renew_for_a_block(client)
        recover_abandoned(client)
        recover_uncertain(client)
        waiting(client)
        semaphore(client)
        watch_and_list(client)
        election(client)
    asyncio.run(async_client())
    print("\nWalkthrough complete.")


if __name__ == "__main__":
    main()
