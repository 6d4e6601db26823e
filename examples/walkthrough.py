"""The seed's walkthrough, section by section, in Python.

Run it with `scripts/walkthrough.sh`, which starts a local reference server and sets
VOLCANO_ANON_KEY, VOLCANO_SERVICE_KEY and VOLCANO_API_URL; or aim it at any Volcano server by
setting those three yourself.
"""

from __future__ import annotations

import asyncio
import os
import uuid

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
    asyncio.run(async_client())
    print("\nWalkthrough complete.")


if __name__ == "__main__":
    main()
