"""`volcano.Client`: the synchronous client and its `locks` namespace."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import httpx

from . import _config, _requests, _tracing, _validate
from ._base import BaseClient
from ._clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    import uuid
    from collections.abc import Callable, Iterator
    from datetime import timedelta
    from types import TracebackType

    from . import _watch
    from ._elections import Elections
    from ._engine import Engine
    from ._exceptions import Error
    from ._groups import Groups
    from ._guard import LockGuard
    from ._models import ForceReleaseResult, LockHolder, LockLease, LockState


class Client(BaseClient[httpx.Client, "Engine", "Locks"]):
    """A client of the Volcano locks API, for threads and plain synchronous code.

    Every argument defaults to its environment variable. Use it as a context manager, or call
    `close()` when done; it is safe to share between threads.

    Args:
        anon_key: The project's anon key (default: `VOLCANO_ANON_KEY`). It names the project.
        service_key: The project's service key (default: `VOLCANO_SERVICE_KEY`), the
            credential. Keep it on trusted servers only.
        api_url: The API's base URL (default: `VOLCANO_API_URL`, else
            `https://api.volcano.dev`). Requests always go there, even through `http_client`.
        timeout: Seconds (or a `timedelta`) each request may take; default 10.
        http_client: An `httpx.Client` to send through (for proxies, TLS settings, or tests).
            Its base URL and timeout are not used; its default headers, cookies and query
            parameters are read once, here. `close()` leaves it open.

    Raises:
        InvalidArgumentError: A key is missing (the message names its variable), or an
            argument is malformed.
    """

    def __init__(
        self,
        *,
        anon_key: str | None = None,
        service_key: str | None = None,
        api_url: str | None = None,
        timeout: float | timedelta = _config.DEFAULT_TIMEOUT,
        http_client: httpx.Client | None = None,
        _clock: Clock = SYSTEM_CLOCK,  # for tests: the clock of renewals and retries
    ) -> None:
        from ._engine import Engine  # the renewal machinery: with the first client

        super().__init__(
            httpx.Client,
            Engine,
            Locks,
            anon_key=anon_key,
            service_key=service_key,
            api_url=api_url,
            timeout=timeout,
            http_client=http_client,
            clock=_clock,
        )

    @functools.cached_property
    def elections(self) -> Elections:
        """Leader elections on locks: campaign, leader, observe."""
        from ._elections import Elections  # loaded with the first election

        return Elections(self._engine)

    @functools.cached_property
    def groups(self) -> Groups:
        """Groups of members with capabilities: create, join, members, watch, campaign..."""
        from ._groups import Groups  # loaded with the first group call

        return Groups(self._engine)

    def __enter__(self) -> Client:
        self._engine.check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop renewing, mark active guards lost, and close the HTTP client if it is ours.

        Calling it again does nothing. A closed client raises `ClientClosedError`.
        """
        if self._engine.close() and self._owns_http:
            self._http.close()


class Locks:
    """The lock operations of a `Client`, reached as `client.locks`.

    Every method checks its arguments before sending and raises `InvalidArgumentError`
    naming a bad one; `ClientClosedError` once the client is closed; `APIConnectionError`
    (or `APITimeoutError`) when no answer arrived; and an `APIStatusError` subclass for an
    error answer. Every method accepts `request_id=`, a UUID string (any letter case, kept
    exactly as spelled) or `uuid.UUID`; a fresh one is made when it is left out.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __repr__(self) -> str:
        return f"<Locks of {self._engine.describe()}>"

    @_tracing.traced("acquire")
    def acquire(
        self,
        key: str,
        *,
        ttl: float | timedelta,
        limit: int = 1,
        shared: bool = False,
        wait: float | timedelta = 0,
        label: str | None = None,
        token: str | uuid.UUID | None = None,
        request_id: str | uuid.UUID | None = None,
    ) -> LockLease:
        """Acquire a lease on `key` for `ttl` seconds, waiting up to `wait` seconds for it.

        With `limit` N above 1 the key is a semaphore: up to N callers hold a lease on it at
        once, each with its own owner token and its own fencing token (every grant takes the
        key's next token), and callers beyond N wait for a slot in order of arrival.

        With `shared=True` the lease is shared (a reader's): any number of shared leases hold
        the key at once, never beside an exclusive one (a writer's, the default). Every grant
        takes the key's next fencing token, shared or not. Waiters keep arrival order, and a
        shared acquire never passes an exclusive one waiting ahead of it: while one waits, a
        shared acquire waits too (or, without `wait`, raises `LockHeldError`).

        ```python
        lease = client.locks.acquire("config-store", ttl=30, shared=True)
        try:
            print("reading under fencing token", lease.fencing_token)
        finally:
            client.locks.release("config-store", lease)
        ```

        With `wait`, a key held by another owner puts this caller in the key's queue on the
        server: callers are served in order of arrival, and the lock is handed over the moment
        its holder releases it or its lease expires (no polling). The lease's ttl counts from
        that moment. A wait longer than one request may hold (50 s) is a chain of requests
        with the same owner token, which keeps the place in line. Interrupting a waiting call
        (Ctrl-C, or cancelling the task) closes its connection, which takes it out of line.

        A transport failure or a 503 is retried once with the very same owner token, request
        id, key, ttl and credentials; nothing else is retried. To recover after the retry also
        failed, pass the same `token` and `request_id` again: the server then returns the
        lease it granted, if it granted one.

        Args:
            key: The lock's name: 1 to 255 characters, a letter or digit, then letters,
                digits, `.`, `_`, `:` or `-`.
            ttl: The lease's time to live: seconds (0.1 to 86400) or a `timedelta`.
            limit: How many leases the key may have at once: 1 (the default, a lock) to
                1000. The limit belongs to the key while it has a live lease or a waiter;
                every caller of one key must ask for the same.
            shared: Take a shared lease (beside other shared holders) instead of an exclusive
                one; False by default. Not with a `limit` above 1.
            wait: How long to wait for a held lock: seconds or a `timedelta`; 0 (the default)
                answers at once.
            label: A public label for the lease (0 to 200 printable ASCII characters: a host
                name, an address), shown to anyone who reads the key in its `holders`; never
                a secret. None (the default): no label.
            token: The owner token (a UUID); a fresh one by default. Keep it private.
            request_id: The request id (a UUID) of the first request; a fresh one by default.

        Returns:
            The new lease. Acquiring again with a live holder's own token returns that
            lease, its expiry moved to now + ttl (and its label set to `label`).

        Raises:
            LockHeldError: Other owners hold the lease (every slot, with a limit) and the wait
                ran out (`retry_after` says how long the soonest lease has left).
            LimitMismatchError: The key is in use with another limit (`limit` says which).
            ModeMismatchError: This `token` holds a live lease of the key in the other mode
                (shared or exclusive): release it first.
            SharedWithLimitError: `shared=True` on a key in use as a semaphore, or a `limit`
                on a key held shared.
        """
        acquisition = _requests.acquire(
            key,
            ttl=ttl,
            limit=limit,
            shared=shared,
            wait=wait,
            label=label,
            token=token,
            request_id=request_id,
        )
        return self._engine.acquire(acquisition).value

    @_tracing.traced("renew")
    def renew(
        self,
        key: str,
        lease: LockLease,
        *,
        ttl: float | timedelta | None = None,
        label: str | None = None,
        request_id: str | uuid.UUID | None = None,
    ) -> LockLease:
        """Extend `lease` to `ttl` seconds from now; it is not retried.

        Args:
            key: The lock's name; it must be the lease's key.
            lease: The lease to extend.
            ttl: The new time to live (seconds or `timedelta`); default: the lease's own.
            label: A new public label for the lease ("" for none); None (the default) keeps
                its label. A new label is a change of the key that its watchers see.
            request_id: The request id (a UUID); a fresh one by default.

        Returns:
            A new lease with the same fencing token and a later expiry; `lease` is unchanged.
            Keep the new one.

        Raises:
            LeaseNotHeldError: The lease expired, was released, force-released or taken over.
        """
        call = _requests.renew(key, lease, ttl=ttl, label=label, request_id=request_id)
        return self._engine.send(call).value

    @_tracing.traced("release")
    def release(
        self, key: str, lease: LockLease, *, request_id: str | uuid.UUID | None = None
    ) -> None:
        """End `lease`; it is not retried.

        Args:
            key: The lock's name; it must be the lease's key.
            lease: The lease to end.
            request_id: The request id (a UUID); a fresh one by default.

        Raises:
            LeaseNotHeldError: The lease expired, was released, force-released or taken over.
        """
        self._engine.send(_requests.release(key, lease, request_id=request_id))

    @_tracing.traced("get")
    def get(self, key: str, *, request_id: str | uuid.UUID | None = None) -> LockState:
        """Report whether `key` is held, until when, by whom and its version, without acquiring.

        Args:
            key: The lock's name.
            request_id: The request id (a UUID); a fresh one by default.
        """
        return self._engine.send(_requests.get(key, request_id=request_id)).value

    @_tracing.traced("force_release")
    def force_release(
        self, key: str, *, request_id: str | uuid.UUID | None = None
    ) -> ForceReleaseResult:
        """Remove `key`'s live lease, whoever holds it: administrative recovery only.

        The former holder may still be running, so use it only where the protected resource
        enforces fencing tokens. Removing nothing is not an error (`released` is False).

        Args:
            key: The lock's name.
            request_id: The request id (a UUID); a fresh one by default.
        """
        return self._engine.send(_requests.force_release(key, request_id=request_id)).value

    @_tracing.traced("check")
    def check(
        self, key: str, fencing_token: int, *, request_id: str | uuid.UUID | None = None
    ) -> bool:
        """Whether `fencing_token` names a live lease of `key` now: the fence check.

        For the protected resource (a database, a file store) that is handed work fenced with
        a token: asking before it accepts the work turns away a holder whose lease has ended
        (released, expired or force-released), for any limit. A token that was never issued is
        not live either. The answer is true when the server sends it; a lease may end a moment
        later, so a store that can also keep the highest token it has accepted per key (and
        refuse lower ones) should, with a limit of 1. It is not retried.

        ```python
        lease = client.locks.acquire("daily-report", ttl=30)
        assert client.locks.check("daily-report", lease.fencing_token)
        client.locks.release("daily-report", lease)
        assert not client.locks.check("daily-report", lease.fencing_token)
        ```

        Args:
            key: The lock's name.
            fencing_token: The token to check, a whole number from 1 to 2^53-1.
            request_id: The request id (a UUID); a fresh one by default.

        Returns:
            True while the lease with this fencing token is live by the server's clock.
        """
        call = _requests.check(key, fencing_token, request_id=request_id)
        return self._engine.send(call).value

    def watch(self, key: str, *, after_version: int | None = None) -> _watch.LockWatch:
        """Watch `key`: its state now, then one `LockState` per change, as they happen.

        ```python
        with client.locks.watch("daily-report") as states:
            print("now", next(states).version)
            lease = client.locks.acquire("daily-report", ttl=30, label="worker-7")
            state = next(states)  # as soon as the grant is made
            print(state.version, [holder.label for holder in state.holders])
            client.locks.release("daily-report", lease)
        ```

        Or `for state in states:` to go on until the loop breaks or the watch is closed.

        A change is a grant, a release, an expiry, a force release or a label changed by a
        renewal (a renewal that keeps the label is not one). Each request is a long poll that
        the server answers as soon as the key's version moves, so a change is heard as soon as
        it happens, through whichever server. Changes that come faster than the polls are
        folded into the latest state: states in between may be skipped, never the latest, and
        versions only go up. A transport failure, a timeout or an overloaded server (429, 5xx)
        is retried after a backoff of 0.2 s doubling up to 5 s, from the last version seen;
        other errors end the watch (raised by the iteration).

        Each watch holds one of the client's HTTP connections while it waits (httpx's pool
        has 100 by default), and the renewals of the client's guards need them too: watch a key
        once per process and share its states, and give watches a client of their own when
        there are more than a few.

        Args:
            key: The lock's name.
            after_version: Start after this version (a `LockState.version` seen before):
                the first state is the first one that differs. None (the default): the first
                state is the key's state now.

        Returns:
            A `LockWatch`: an iterator, and a context manager that closes it.
        """
        from . import _watch  # loaded with the first watch or listing

        return _watch.watch(self._engine, key, after_version)

    def list(self, prefix: str = "", *, page_size: int = 100) -> Iterator[LockState]:
        """Every key of the project that is held or waited for, in key order, with its state.

        ```python
        for state in client.locks.list("report-"):
            print(state.key, state.held, state.waiters)
        ```

        Pages of `page_size` keys are asked for one after another as the iteration goes on.
        A key held or waited for throughout the listing appears exactly once; one acquired or
        freed meanwhile may or may not.

        Args:
            prefix: Only keys starting with this ("": every key).
            page_size: Keys per request, 1 to 500 (default 100).
        """
        checked, size = _validate.prefix(prefix), _validate.page_size(page_size)
        from . import _watch  # loaded with the first watch or listing

        return _watch.pages(
            self._engine.send,
            lambda after: _requests.list_page(checked, after=after, page_size=size),
            "",
        )

    def holders(self, key: str, *, page_size: int = 100) -> Iterator[LockHolder]:
        """Every live lease of `key`, in fencing token order (never an owner token).

        ```python
        for holder in client.locks.holders("build-slots"):
            print(holder.fencing_token, holder.label, holder.expires_at)
        ```

        A key's state shows at most 20 holders (those ending soonest) and counts them all in
        `LockState.holder_count`; this pages through every one, asking for pages of
        `page_size` as the iteration goes on. A lease live throughout appears exactly once;
        one granted or ended meanwhile may or may not.

        Args:
            key: The lock's name.
            page_size: Leases per request, 1 to 100 (default 100).
        """
        checked, size = (
            _validate.key(key),
            _validate.page_size(page_size, _validate.HOLDERS_PAGE_MAX),
        )
        from . import _watch  # loaded with the first watch or listing

        return _watch.pages(
            self._engine.send,
            lambda after: _requests.holders_page(checked, after=after, page_size=size),
            0,
        )

    def with_lock(
        self,
        key: str,
        *,
        ttl: float | timedelta,
        limit: int = 1,
        shared: bool = False,
        wait: float | timedelta = 0,
        label: str | None = None,
        token: str | uuid.UUID | None = None,
        request_id: str | uuid.UUID | None = None,
        on_lost: Callable[[Error], object] | None = None,
        on_at_risk: Callable[[Error], object] | None = None,
        at_risk_margin: float | timedelta | None = None,
    ) -> LockGuard:
        """A guard that holds `key` for a `with` block, renewing the lease in the background.

        ```python
        with client.locks.with_lock("daily-report", ttl=30, on_lost=alert) as guard:
            for item in work:
                guard.check()  # raises LockLostError once ownership is lost
                write(item, fence=guard.lease.fencing_token)
        ```

        Entering acquires like `acquire` (same retry-once and waiting, with `limit`,
        `shared`, `wait`, `token` and `request_id`); renewals and the release use fresh
        request ids. With
        `request_id`, a replayed answer may describe an earlier acquisition whose age this
        client cannot know; and after a wait the lease was granted at a moment this client
        cannot know either. So when the answer is a replay, or a wait outlasted a third of the
        ttl, entering renews the lease once (not retried) and dates it from that renewal; a
        lease that has meanwhile expired raises `LeaseNotHeldError`. Arguments are checked
        here, before entering. Exiting does not raise when the lease was lost: check the guard.

        Args:
            key: The lock's name.
            ttl: Each lease's time to live: seconds (0.1 to 86400) or a `timedelta`.
            limit: How many leases the key may have at once (see `acquire`); default 1.
            shared: Hold a shared lease instead of an exclusive one (see `acquire`).
            wait: How long entering may wait for a held lock (see `acquire`); default 0.
            label: The lease's public label (see `acquire`); renewals keep it.
            token: The owner token for the acquisition (a UUID); a fresh one by default.
            request_id: The acquisition's request id (a UUID); a fresh one by default.
            on_lost: Called once, with `lost_reason`, when ownership is lost.
            on_at_risk: Called with the last renewal error each time the lease becomes at
                risk (it may then be renewed after all, or lost).
            at_risk_margin: How long before the lease may expire, without a successful
                renewal, it counts as at risk: seconds or a `timedelta`, from 0 to half the
                ttl; default a third of the ttl.

        The callbacks run on one of the client's renewal threads (or in the thread that exits
        the block, for a loss found there); keep them short. What they raise is logged.
        """
        plan = _requests.with_lock(
            key,
            ttl=ttl,
            limit=limit,
            shared=shared,
            wait=wait,
            label=label,
            token=token,
            request_id=request_id,
            at_risk_margin=at_risk_margin,
            on_lost=on_lost,
            on_at_risk=on_at_risk,
        )
        from ._guard import LockGuard  # loaded with the first guard

        return LockGuard(self._engine, plan)
