"""The one-request lock commands: get, acquire, renew, release, force-release, check.

Each makes one call on a `volcano.Client` and returns the fields to print. renew and release
name a lease by its owner and fencing tokens, as the HTTP API does (the owner token from a file,
the environment or --token: `_owner_token`); the SDK takes a `LockLease`, so they build one from
those two (its expiry is not sent, so any value does).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import volcano

from . import _output
from ._owner_token import owner_token
from ._parser import acquisition_options

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from ._output import Fields


def get(client: volcano.Client, args: argparse.Namespace) -> Fields:
    """`volcano locks get KEY`."""
    return _output.state(client.locks.get(args.key))


def acquire(client: volcano.Client, args: argparse.Namespace) -> Fields:
    """`volcano locks acquire KEY --ttl S [--limit N | --shared] [--wait S] [--token T] ...`."""
    return _output.lease(client.locks.acquire(args.key, **acquisition_options(args)))


def renew(client: volcano.Client, args: argparse.Namespace) -> Fields:
    """`volcano locks renew KEY [--token-file PATH | --token T] --fencing-token N --ttl S`."""
    return _output.lease(client.locks.renew(args.key, _named_lease(args), ttl=args.ttl))


def release(client: volcano.Client, args: argparse.Namespace) -> Fields:
    """`volcano locks release KEY [--token-file PATH | --token T] --fencing-token N`."""
    client.locks.release(args.key, _named_lease(args))
    return _output.released(args.key, released=True, fencing_token=args.fencing_token, count=1)


def force_release(client: volcano.Client, args: argparse.Namespace) -> Fields:
    """`volcano locks force-release KEY`."""
    result = client.locks.force_release(args.key)
    return _output.released(
        result.key,
        released=result.released,
        fencing_token=result.fencing_token,
        count=result.released_count,
    )


def check(client: volcano.Client, args: argparse.Namespace) -> Fields:
    """`volcano locks check KEY TOKEN`: the exit status says whether it is live (`_exit`)."""
    live = client.locks.check(args.key, args.fencing_token)
    return _output.checked(args.key, args.fencing_token, live=live)


COMMANDS: dict[str, Callable[[volcano.Client, argparse.Namespace], Fields]] = {
    "get": get,
    "acquire": acquire,
    "renew": renew,
    "release": release,
    "force-release": force_release,
    "check": check,
}


def _named_lease(args: argparse.Namespace) -> volcano.LockLease:
    return volcano.LockLease(
        key=args.key,
        owner_token=owner_token(args),
        fencing_token=args.fencing_token,
        expires_at=datetime.now(UTC),
        ttl_seconds=getattr(args, "ttl", None) or 1.0,
    )
