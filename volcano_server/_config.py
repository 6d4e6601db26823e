"""The server's settings, from the command line, the environment or a test."""

from __future__ import annotations

import re

import attrs

from .storage import DEFAULT_DATABASE_URL, Synchronous

__all__ = ["MAX_METRIC_KEY_PREFIXES", "Limits", "Quotas", "ServerConfig", "WaitingSettings"]

# A lock key's pattern (openapi.yaml): a metric key prefix is the start of one.
_KEY_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")
# Each prefix adds a series per outcome and bucket to every lock metric: keep them few.
MAX_METRIC_KEY_PREFIXES = 32


@attrs.frozen
class WaitingSettings:
    """How long places, reservations and heartbeats last; every field has a sane default."""

    # An away waiter (wait ran out, connection closed) may come back to its place this long.
    rejoin_seconds: float = 5.0
    # A key reserved for a waiter held by another server lapses if that server does not take it.
    reserve_seconds: float = 2.0
    # Each server writes its heartbeat this often; it counts as dead after `heartbeat_lifetime`.
    heartbeat_seconds: float = 1.0
    heartbeat_lifetime: float = 3.0
    # After its own heartbeat came back from a lapse (an outage), how much longer than a lifetime
    # a server waits before it judges dead one whose heartbeat ran out before that: a live server
    # may reach the database seconds later than another (its requests are answered within about
    # 10 s, docs/production.md "When the network fails"), and beats each second once it does.
    recovery_seconds: float = 10.0
    # SQLite shared by several servers: how often one looks for keys reserved for its waiters.
    poll_seconds: float = 0.1
    # The longest one request waits, whatever it asks (at most the API's 60 s): below a load
    # balancer's idle timeout, so the balancer never cuts a quiet waiting request. A request
    # asking longer gets 409 lock_held after this and acquires again to wait on, in its place.
    max_wait_seconds: float = 60.0

    def __attrs_post_init__(self) -> None:
        if not 0 < self.max_wait_seconds <= 60:
            raise ValueError(
                f"the longest wait must be more than 0 and at most 60 seconds,"
                f" got {self.max_wait_seconds:g}"
            )


@attrs.frozen
class Limits:
    """What one connection may cost the server; see docs/production.md.

    The timeouts bound how long the server waits for a *client*: for a request's head (from the
    connection's start, or from the first byte of a later request on it), for its body (from
    the end of its head), and for the next request on an idle kept-alive connection. Nothing
    limits how long a request that has fully arrived may take to be answered.
    """

    # Request line and header fields together; more gets 431 and the connection is closed.
    max_header_bytes: int = 16_384
    # Header fields of one request: each costs a call into Python while parsing, and every
    # header lookup reads them all; more gets 431. Clients send about ten.
    max_header_fields: int = 100
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    # How long answers may wait for a client to read them (buffered past the high-water mark,
    # or unsent when the connection closes); then the connection is aborted.
    write_timeout: float = 10.0
    # Longer than clients' own idle expiry (httpx: 5 s), so the client, not the server, ends an
    # idle connection and never sends a request into one being closed.
    keepalive_timeout: int = 15
    # Open connections per process, waiting requests included; past it, new ones get 503 (a
    # health probe is still answered, on one of a quarter as many spare seats).
    max_connections: int = 10_000
    # Connections one client address may hold open at once; 0 (the default) for no cap. Leave it
    # off behind a proxy or load balancer: every client then shares the proxy's address.
    max_connections_per_address: int = 0
    # Connections the kernel may queue for the server to accept (Linux caps it at
    # net.core.somaxconn). A queue that overflows drops connection attempts, which clients
    # retry only after 1 s, then 3 s; the server accepts a burst in turns of 32.
    backlog: int = 4_096

    def __attrs_post_init__(self) -> None:
        if self.max_header_bytes < 1024:
            raise ValueError(
                f"the header limit must be at least 1024 bytes, got {self.max_header_bytes}"
            )
        for name in ("header_timeout", "body_timeout", "write_timeout", "keepalive_timeout"):
            value = getattr(self, name)
            if not 0 < value <= 3600:
                raise ValueError(
                    f"{name.replace('_', ' ')} must be 0 to 3600 seconds, got {value:g}"
                )
        if self.max_header_fields < 10:
            raise ValueError(
                f"the header field limit must be at least 10, got {self.max_header_fields}"
            )
        if self.max_connections < 1:
            raise ValueError(f"max connections must be at least 1, got {self.max_connections}")
        if self.max_connections_per_address < 0:
            raise ValueError(
                "max connections per address must be 0 (no cap) or more,"
                f" got {self.max_connections_per_address}"
            )
        if not 1 <= self.backlog <= 65_535:
            raise ValueError(f"the backlog must be 1 to 65535, got {self.backlog}")


@attrs.frozen
class Quotas:
    """What one project may store, each refused with 409 quota_exceeded past it (issue 33).

    Off (or at the API's own bounds) by default: a server shared by projects that do not trust
    each other sets them (docs/production.md).
    """

    # Keys one project has stored at once (held, waited for, or used within the key retention);
    # 0 for no quota. Counted when an acquire would store a new key.
    keys_per_project: int = 0
    # The largest `limit` (semaphore slots) an acquire may ask for: at most the API's 1,000.
    holders_per_key: int = 1_000
    # The longest label, in bytes (labels are printable ASCII): at most the API's 200.
    label_bytes: int = 200

    def __attrs_post_init__(self) -> None:
        if self.keys_per_project < 0:
            raise ValueError(
                f"the keys quota must be 0 (none) or more, got {self.keys_per_project}"
            )
        if not 1 <= self.holders_per_key <= 1_000:
            raise ValueError(f"the holders quota must be 1 to 1000, got {self.holders_per_key}")
        if not 0 <= self.label_bytes <= 200:
            raise ValueError(f"the label quota must be 0 to 200 bytes, got {self.label_bytes}")


@attrs.frozen
class ServerConfig:
    """How a server runs. Every field has a production-sensible default."""

    database_url: str = DEFAULT_DATABASE_URL
    # How long a request id's outcome is kept for replay (the contract asks for >= 10 minutes).
    retention_seconds: float = 600.0
    # Bodies are tiny JSON objects; anything bigger is refused with 413 before parsing.
    max_body_bytes: int = 16_384
    # A batch renewal carries up to 500 entries (`POST /v1/leases/renew`).
    max_batch_body_bytes: int = 262_144
    # A group's join or change of capabilities (up to 65,538 bytes of capabilities, however they are
    # escaped), or a batch renewal of up to 500 memberships (`POST /v1/members/renew`).
    max_group_body_bytes: int = 524_288
    # Requests per second per project (per server process); None disables the limit.
    rate_limit: float | None = None
    # What one project may hold open at once in one process (more gets 429): waiting acquires,
    # each holding a connection for up to a minute (keep it well below the connection cap), and
    # other requests in flight, each holding a worker thread or a database connection.
    max_waiters_per_project: int = 1_000
    max_requests_per_project: int = 256
    # Bytes of request bodies one project may have in flight at once in one process (each body
    # counted at its Content-Length, or at its limit): 8 full batch renewals, or hundreds of
    # small ones. More gets 429, before the body is read.
    max_body_bytes_per_project: int = 2 * 1024 * 1024
    # How long a request's storage work may wait in line behind its own project's earlier work
    # (the project is over its share of the server's time) before it is refused with 429.
    patience: float = 2.0
    # Keys with no lease and nobody in line, unchanged this long, are deleted (purged); used
    # again, they go on from their project's floor (fencing tokens and versions never go back).
    key_retention_seconds: float = 3_600.0
    # Stored outcomes past their retention are deleted in batches this often.
    purge_interval_seconds: float = 5.0
    purge_batch: int = 5_000
    # SQLite only: "full" survives power loss, "normal" only a killed process (see the README).
    sqlite_synchronous: Synchronous = "full"
    access_log: bool = True
    # How long a known key stays cached in memory: a revoked key is refused by every server
    # process within this (plus a request's time), and the contract asks for 5 s at most.
    auth_cache_seconds: float = 2.0
    # How often the keys' "last used" times are written to the database.
    key_use_flush_seconds: float = 30.0
    limits: Limits = Limits()
    # What one project may store (off by default).
    quotas: Quotas = Quotas()
    # Waiting for a lock: how long places and reservations last, heartbeats, polling.
    waiting: WaitingSettings = attrs.field(factory=WaitingSettings)
    # The lock metrics carry no key; these prefixes (opt-in) label them, the rest is "_other".
    metric_key_prefixes: tuple[str, ...] = ()
    # Whether a request's span names its lock key (keys may say more than an operator wants
    # a tracing backend to keep).
    trace_lock_keys: bool = False

    def __attrs_post_init__(self) -> None:
        if self.retention_seconds < 600:
            raise ValueError(
                f"retention must be at least 600 seconds, got {self.retention_seconds:g}"
            )
        if self.key_retention_seconds < self.retention_seconds:
            raise ValueError(
                f"key retention must be at least the request retention"
                f" ({self.retention_seconds:g} s), got {self.key_retention_seconds:g}"
            )
        self._check_bodies()
        self._check_shares()
        if self.sqlite_synchronous not in ("full", "normal"):
            raise ValueError(
                f"sqlite synchronous must be full or normal, got {self.sqlite_synchronous!r}"
            )
        for prefix in self.metric_key_prefixes:
            if not _KEY_PREFIX.fullmatch(prefix):
                raise ValueError(
                    f"a metric key prefix is the start of a lock key (1 to 255 of A-Z a-z 0-9"
                    f" . _ : -, starting with a letter or digit), got {prefix!r}"
                )
        if len(set(self.metric_key_prefixes)) > MAX_METRIC_KEY_PREFIXES:
            raise ValueError(
                f"at most {MAX_METRIC_KEY_PREFIXES} metric key prefixes,"
                f" got {len(set(self.metric_key_prefixes))}"
            )

    def _check_bodies(self) -> None:
        if self.max_body_bytes < 1024:
            raise ValueError(
                f"the body limit must be at least 1024 bytes, got {self.max_body_bytes}"
            )
        if self.max_batch_body_bytes < self.max_body_bytes:
            raise ValueError(
                f"the batch body limit must be at least the body limit ({self.max_body_bytes}),"
                f" got {self.max_batch_body_bytes}"
            )
        if self.max_group_body_bytes < self.max_body_bytes:
            raise ValueError(
                f"the group body limit must be at least the body limit ({self.max_body_bytes}),"
                f" got {self.max_group_body_bytes}"
            )
        largest = max(self.max_batch_body_bytes, self.max_group_body_bytes)
        if self.max_body_bytes_per_project < largest:
            raise ValueError(
                f"the bodies one project may have in flight must hold at least the largest one"
                f" ({largest} bytes), got {self.max_body_bytes_per_project}"
            )

    def _check_shares(self) -> None:
        for name in ("max_waiters_per_project", "max_requests_per_project"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"{name.replace('_', ' ')} must be at least 1, got {getattr(self, name)}"
                )
        if not 0 < self.patience <= 60:
            raise ValueError(
                f"the patience must be more than 0 and at most 60 s, got {self.patience:g}"
            )
        if self.rate_limit is not None and self.rate_limit <= 0:
            raise ValueError(f"the rate limit must be positive, got {self.rate_limit:g}")
