from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.acquire_request import AcquireRequest
from ...models.error import Error
from ...models.lock_lease import LockLease
from ...types import UNSET, Response, Unset


def _get_kwargs(
    key: str,
    *,
    body: AcquireRequest,
    x_request_id: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(x_request_id, Unset):
        headers["X-Request-Id"] = x_request_id

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/locks/{key}/acquire".format(
            key=quote(str(key), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | LockLease | None:
    if response.status_code == 200:
        response_200 = LockLease.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())

        return response_403

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())

        return response_404

    if response.status_code == 405:
        response_405 = Error.from_dict(response.json())

        return response_405

    if response.status_code == 408:
        response_408 = Error.from_dict(response.json())

        return response_408

    if response.status_code == 409:
        response_409 = Error.from_dict(response.json())

        return response_409

    if response.status_code == 413:
        response_413 = Error.from_dict(response.json())

        return response_413

    if response.status_code == 415:
        response_415 = Error.from_dict(response.json())

        return response_415

    if response.status_code == 422:
        response_422 = Error.from_dict(response.json())

        return response_422

    if response.status_code == 429:
        response_429 = Error.from_dict(response.json())

        return response_429

    if response.status_code == 431:
        response_431 = Error.from_dict(response.json())

        return response_431

    if response.status_code == 500:
        response_500 = Error.from_dict(response.json())

        return response_500

    if response.status_code == 503:
        response_503 = Error.from_dict(response.json())

        return response_503

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Error | LockLease]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    key: str,
    *,
    client: AuthenticatedClient | Client,
    body: AcquireRequest,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | LockLease]:
    """Acquire a lease on a key.

     Acquires a free or expired key with a new, greater fencing token; with `limit` N, one of
    the key's N slots. Acquiring a key on which this same `owner_token` has a live lease
    returns that lease (same fencing token) with its expiry moved to now + `ttl_seconds`.
    While all the key's slots are held by other owners, or other callers are queued for the
    key, the answer is `409 lock_held` with `Retry-After` set to the whole seconds until the
    soonest live lease expires (at least 1). A `limit` other than the key's own while it has
    a live lease or a waiter is `409 limit_mismatch`. The lease carries `label` (none when
    absent), shown in the key's `holders`; a waiter's label goes with the lease it is
    granted.

    With `shared: true` the lease is shared: it is granted beside other shared leases of the
    key while nobody waits in line, never beside an exclusive one. Acquiring with the
    `owner_token` of a live lease in the other mode is `409 mode_mismatch`; `shared` with a
    `limit` above 1, `shared` on a key in use as a semaphore, or a `limit` above 1 on a key
    held shared is `409 shared_with_limit`.

    With `wait_seconds` above 0 the caller joins the key's queue instead, and the request stays
    open until it is first in line and a slot is free (`200`, a lease whose ttl counts from
    the moment it is granted) or until `wait_seconds` pass (`409 lock_held`). Waiters are
    served in order of arrival, and no caller gets the lock ahead of a queued waiter. A
    release, a force release or an expiry hands the lock to the first waiter at once. A waiter
    whose connection closes, or whose wait runs out, leaves the queue at once and is never
    granted a lease; if it acquires again with the same `owner_token` within a few seconds
    (a retry with the same `X-Request-Id`, or the next request of a longer wait made of
    several), it gets its old place back. Send `X-Request-Id` with a waiting acquire: should
    the answer be lost, a retry with the same id gets the granted lease back.

    Args:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or
            `-`.
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (AcquireRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LockLease]
    """

    kwargs = _get_kwargs(
        key=key,
        body=body,
        x_request_id=x_request_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    key: str,
    *,
    client: AuthenticatedClient | Client,
    body: AcquireRequest,
    x_request_id: str | Unset = UNSET,
) -> Error | LockLease | None:
    """Acquire a lease on a key.

     Acquires a free or expired key with a new, greater fencing token; with `limit` N, one of
    the key's N slots. Acquiring a key on which this same `owner_token` has a live lease
    returns that lease (same fencing token) with its expiry moved to now + `ttl_seconds`.
    While all the key's slots are held by other owners, or other callers are queued for the
    key, the answer is `409 lock_held` with `Retry-After` set to the whole seconds until the
    soonest live lease expires (at least 1). A `limit` other than the key's own while it has
    a live lease or a waiter is `409 limit_mismatch`. The lease carries `label` (none when
    absent), shown in the key's `holders`; a waiter's label goes with the lease it is
    granted.

    With `shared: true` the lease is shared: it is granted beside other shared leases of the
    key while nobody waits in line, never beside an exclusive one. Acquiring with the
    `owner_token` of a live lease in the other mode is `409 mode_mismatch`; `shared` with a
    `limit` above 1, `shared` on a key in use as a semaphore, or a `limit` above 1 on a key
    held shared is `409 shared_with_limit`.

    With `wait_seconds` above 0 the caller joins the key's queue instead, and the request stays
    open until it is first in line and a slot is free (`200`, a lease whose ttl counts from
    the moment it is granted) or until `wait_seconds` pass (`409 lock_held`). Waiters are
    served in order of arrival, and no caller gets the lock ahead of a queued waiter. A
    release, a force release or an expiry hands the lock to the first waiter at once. A waiter
    whose connection closes, or whose wait runs out, leaves the queue at once and is never
    granted a lease; if it acquires again with the same `owner_token` within a few seconds
    (a retry with the same `X-Request-Id`, or the next request of a longer wait made of
    several), it gets its old place back. Send `X-Request-Id` with a waiting acquire: should
    the answer be lost, a retry with the same id gets the granted lease back.

    Args:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or
            `-`.
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (AcquireRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LockLease
    """

    return sync_detailed(
        key=key,
        client=client,
        body=body,
        x_request_id=x_request_id,
    ).parsed


async def asyncio_detailed(
    key: str,
    *,
    client: AuthenticatedClient | Client,
    body: AcquireRequest,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | LockLease]:
    """Acquire a lease on a key.

     Acquires a free or expired key with a new, greater fencing token; with `limit` N, one of
    the key's N slots. Acquiring a key on which this same `owner_token` has a live lease
    returns that lease (same fencing token) with its expiry moved to now + `ttl_seconds`.
    While all the key's slots are held by other owners, or other callers are queued for the
    key, the answer is `409 lock_held` with `Retry-After` set to the whole seconds until the
    soonest live lease expires (at least 1). A `limit` other than the key's own while it has
    a live lease or a waiter is `409 limit_mismatch`. The lease carries `label` (none when
    absent), shown in the key's `holders`; a waiter's label goes with the lease it is
    granted.

    With `shared: true` the lease is shared: it is granted beside other shared leases of the
    key while nobody waits in line, never beside an exclusive one. Acquiring with the
    `owner_token` of a live lease in the other mode is `409 mode_mismatch`; `shared` with a
    `limit` above 1, `shared` on a key in use as a semaphore, or a `limit` above 1 on a key
    held shared is `409 shared_with_limit`.

    With `wait_seconds` above 0 the caller joins the key's queue instead, and the request stays
    open until it is first in line and a slot is free (`200`, a lease whose ttl counts from
    the moment it is granted) or until `wait_seconds` pass (`409 lock_held`). Waiters are
    served in order of arrival, and no caller gets the lock ahead of a queued waiter. A
    release, a force release or an expiry hands the lock to the first waiter at once. A waiter
    whose connection closes, or whose wait runs out, leaves the queue at once and is never
    granted a lease; if it acquires again with the same `owner_token` within a few seconds
    (a retry with the same `X-Request-Id`, or the next request of a longer wait made of
    several), it gets its old place back. Send `X-Request-Id` with a waiting acquire: should
    the answer be lost, a retry with the same id gets the granted lease back.

    Args:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or
            `-`.
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (AcquireRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LockLease]
    """

    kwargs = _get_kwargs(
        key=key,
        body=body,
        x_request_id=x_request_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    key: str,
    *,
    client: AuthenticatedClient | Client,
    body: AcquireRequest,
    x_request_id: str | Unset = UNSET,
) -> Error | LockLease | None:
    """Acquire a lease on a key.

     Acquires a free or expired key with a new, greater fencing token; with `limit` N, one of
    the key's N slots. Acquiring a key on which this same `owner_token` has a live lease
    returns that lease (same fencing token) with its expiry moved to now + `ttl_seconds`.
    While all the key's slots are held by other owners, or other callers are queued for the
    key, the answer is `409 lock_held` with `Retry-After` set to the whole seconds until the
    soonest live lease expires (at least 1). A `limit` other than the key's own while it has
    a live lease or a waiter is `409 limit_mismatch`. The lease carries `label` (none when
    absent), shown in the key's `holders`; a waiter's label goes with the lease it is
    granted.

    With `shared: true` the lease is shared: it is granted beside other shared leases of the
    key while nobody waits in line, never beside an exclusive one. Acquiring with the
    `owner_token` of a live lease in the other mode is `409 mode_mismatch`; `shared` with a
    `limit` above 1, `shared` on a key in use as a semaphore, or a `limit` above 1 on a key
    held shared is `409 shared_with_limit`.

    With `wait_seconds` above 0 the caller joins the key's queue instead, and the request stays
    open until it is first in line and a slot is free (`200`, a lease whose ttl counts from
    the moment it is granted) or until `wait_seconds` pass (`409 lock_held`). Waiters are
    served in order of arrival, and no caller gets the lock ahead of a queued waiter. A
    release, a force release or an expiry hands the lock to the first waiter at once. A waiter
    whose connection closes, or whose wait runs out, leaves the queue at once and is never
    granted a lease; if it acquires again with the same `owner_token` within a few seconds
    (a retry with the same `X-Request-Id`, or the next request of a longer wait made of
    several), it gets its old place back. Send `X-Request-Id` with a waiting acquire: should
    the answer be lost, a retry with the same id gets the granted lease back.

    Args:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or
            `-`.
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (AcquireRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LockLease
    """

    return (
        await asyncio_detailed(
            key=key,
            client=client,
            body=body,
            x_request_id=x_request_id,
        )
    ).parsed
