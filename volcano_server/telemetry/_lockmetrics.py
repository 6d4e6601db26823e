"""What happens to locks, counted for Prometheus with labels of bounded cardinality.

Each server counts what its own committed transactions did and what its own waiting requests
went through, so across servers sharing one database every grant, every end of a lease and
every wait is counted exactly once, by one server: sum over the servers to see the whole.

- Grants, by how a lease came to its holder (`Grant`): counted by the server whose transaction
  granted it.
- Holds, from the lease's grant to its end (`End`): measured by the server whose transaction
  ended it, from the grant time stored with the lease (`Lease.granted_at_us`) to the end, both
  by the storage clock, so a lease granted by one server and released through another is
  measured alike. An expiry ends a lease at its `expires_at`, and is counted by the first
  transaction that finds it expired and drops it (an acquire or hand-off of the key, or the
  timer of a server holding a waiter for it): a key nobody touches again keeps its expired
  lease, uncounted, until it is used.
- Waits, from joining a key's line to the request's end (`Waited`): measured by the server that
  holds the waiting request, on its monotonic clock.
- Waiters already in line when an acquire joins the end of it; fence checks by their result.

No label names a key, a project or an owner. `KeyPrefixes`, an opt-in allow-list given to the
server, adds one `key_prefix` label whose values are the listed prefixes and `_other`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Generic, NamedTuple, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = [
    "OTHER_KEYS",
    "Checked",
    "End",
    "Ended",
    "Grant",
    "Granted",
    "Joined",
    "KeyPrefixes",
    "LockEvent",
    "LockMetrics",
    "Waited",
]

# The `key_prefix` of a key that starts with none of the listed prefixes (no key starts with _).
OTHER_KEYS = "_other"

# A request waits at most a minute; the first buckets show a hand-off's own delay.
_WAIT_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
# A lease may be held for milliseconds or, renewed, for days.
_HOLD_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0,
)  # fmt: skip
_AHEAD_BUCKETS = (0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)

M = TypeVar("M", Counter, Histogram)


class Grant(enum.Enum):
    """How a lease came to its holder."""

    IMMEDIATE = "immediate"  # an acquire found a free slot
    AFTER_WAIT = "after_wait"  # a waiting request here, handed a freed slot by this server
    HANDED_OVER = "handed_over"  # a waiting request here, taking a slot another server reserved
    ALREADY_HELD = "already_held"  # an acquire by the live holder's own owner token: extended


class End(enum.Enum):
    """How a lease ended."""

    RELEASED = "released"
    EXPIRED = "expired"  # its ttl ran out unrenewed: a crashed, stuck or cut-off holder
    FORCE_RELEASED = "force_released"
    UNDELIVERED = "undelivered"  # granted to a waiting request whose client had left


class Waited(enum.Enum):
    """How a request that joined a key's line ended."""

    GRANTED = "granted"
    TIMED_OUT = "timed_out"  # its wait ran out: 409 lock_held
    CLIENT_LEFT = "client_left"  # its client disconnected
    UNDELIVERED = "undelivered"  # granted, but its client had disconnected
    SUPERSEDED = "superseded"  # a newer request with the same owner token took its place
    REVOKED = "revoked"  # its service key was revoked: 401
    SHUTDOWN = "shutdown"  # the server shut down: 503, its place kept for a retry
    ERROR = "error"  # the database failed it (503), or the server cancelled it


class Granted(NamedTuple):
    """A committed transaction granted a lease of `key`."""

    key: str
    how: Grant


class Ended(NamedTuple):
    """A committed transaction ended a lease of `key` that was held `held_us`."""

    key: str
    how: End
    held_us: int


class Joined(NamedTuple):
    """A committed transaction put an acquire at the end of `key`'s line, `ahead` waiting."""

    key: str
    ahead: int


LockEvent = Granted | Ended | Joined


class KeyPrefixes:
    """The opt-in allow-list of key prefixes that label the lock metrics.

    A key's label is the longest listed prefix it starts with, else `OTHER_KEYS`: the number
    of series stays bounded (the server takes at most 32 prefixes) whatever keys clients use.
    """

    def __init__(self, prefixes: Iterable[str]) -> None:
        self._longest_first = tuple(sorted(set(prefixes), key=len, reverse=True))

    @property
    def labels(self) -> tuple[str, ...]:
        """Every value the `key_prefix` label can take."""
        return (*sorted(self._longest_first), OTHER_KEYS)

    def __call__(self, key: str) -> str:
        """The `key_prefix` label of `key`."""
        for prefix in self._longest_first:
            if key.startswith(prefix):
                return prefix
        return OTHER_KEYS


class _Family(Generic[M]):
    """A metric's children, made once for every (outcome, key prefix): no lookup by label."""

    def __init__(
        self, metric: M, outcomes: type[enum.Enum] | None, prefixes: KeyPrefixes | None
    ) -> None:
        members = list(outcomes) if outcomes is not None else [None]
        labels = prefixes.labels if prefixes is not None else ("",)
        self.child: dict[tuple[enum.Enum | None, str], M] = {
            (member, label): metric.labels(*_values(member, label))
            if member is not None or label
            else metric
            for member in members
            for label in labels
        }


def _values(member: enum.Enum | None, label: str) -> list[str]:
    return [x for x in (member.value if member is not None else "", label) if x]


class LockMetrics:
    """The lock metrics of one server, in `registry`."""

    def __init__(self, registry: CollectorRegistry, prefixes: KeyPrefixes | None = None) -> None:
        self._prefix = prefixes if prefixes is not None else _no_prefix
        by = ["key_prefix"] if prefixes is not None else []
        self._grants = _Family(
            Counter(
                "volcano_lock_grants",
                "Leases granted by this server's transactions, by how the holder came by it.",
                ["outcome", *by],
                registry=registry,
            ),
            Grant,
            prefixes,
        )
        self._holds = _Family(
            Histogram(
                "volcano_lock_hold_seconds",
                "How long the leases this server's transactions ended were held, from grant to"
                " end by the database's clock, by how they ended.",
                ["outcome", *by],
                buckets=_HOLD_BUCKETS,
                registry=registry,
            ),
            End,
            prefixes,
        )
        self._expiries = _Family(
            Counter(
                "volcano_lock_expiries",
                "Leases that ended by their ttl, unrenewed and unreleased (a crashed, stuck or"
                " cut-off holder), counted by the server whose transaction found them expired.",
                by,
                registry=registry,
            ),
            None,
            prefixes,
        )
        self._waits = _Family(
            Histogram(
                "volcano_lock_wait_seconds",
                "How long the acquire requests this server held waited in a key's line, from"
                " joining it to their end, by how the wait ended.",
                ["outcome", *by],
                buckets=_WAIT_BUCKETS,
                registry=registry,
            ),
            Waited,
            prefixes,
        )
        self._ahead = _Family(
            Histogram(
                "volcano_lock_waiters_ahead",
                "Requests already waiting in a key's line when an acquire joined its end.",
                by,
                buckets=_AHEAD_BUCKETS,
                registry=registry,
            ),
            None,
            prefixes,
        )
        self._checks = _Family(
            Counter(
                "volcano_fence_checks",
                "Fence checks (GET /v1/locks/{key}/leases/{fencing_token}) answered, by whether"
                " the token named a live lease.",
                ["result", *by],
                registry=registry,
            ),
            Checked,
            prefixes,
        )

    def record(self, events: Iterable[LockEvent]) -> None:
        """Count what a committed transaction did."""
        for event in events:
            prefix = self._prefix(event.key)
            if isinstance(event, Granted):
                self._grants.child[event.how, prefix].inc()
            elif isinstance(event, Ended):
                self._holds.child[event.how, prefix].observe(event.held_us / 1_000_000)
                if event.how is End.EXPIRED:
                    self._expiries.child[None, prefix].inc()
            else:
                self._ahead.child[None, prefix].observe(event.ahead)

    def waited(self, key: str, outcome: Waited, seconds: float) -> None:
        """Count a waiting request's end, `seconds` after it joined the key's line."""
        self._waits.child[outcome, self._prefix(key)].observe(seconds)

    def checked(self, key: str, *, live: bool) -> None:
        """Count a fence check's answer."""
        result = Checked.LIVE if live else Checked.NOT_LIVE
        self._checks.child[result, self._prefix(key)].inc()


class Checked(enum.Enum):
    """What a fence check found."""

    LIVE = "live"
    NOT_LIVE = "not_live"


def _no_prefix(_key: str) -> str:
    return ""
