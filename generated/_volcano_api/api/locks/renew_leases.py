from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.renew_leases_request import RenewLeasesRequest
from ...models.renew_leases_result import RenewLeasesResult
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    body: RenewLeasesRequest,
    x_request_id: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(x_request_id, Unset):
        headers["X-Request-Id"] = x_request_id

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/leases/renew",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | RenewLeasesResult | None:
    if response.status_code == 200:
        response_200 = RenewLeasesResult.from_dict(response.json())

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
) -> Response[Error | RenewLeasesResult]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: RenewLeasesRequest,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | RenewLeasesResult]:
    """Renew many leases of the project in one request.

     Renews up to 500 leases of the project at once, each entry judged exactly as
    `POST /v1/locks/{key}/renew` would judge it alone: the live lease of that key whose
    `owner_token` and `fencing_token` both match gets the expiry now + `ttl_seconds` and
    keeps its fencing token; anything else (expired, released, force-released, taken over,
    an older token of the same owner) is refused for that entry alone, and changes
    nothing. The answer is `200` with one result per entry, in the order sent: `{key,
    lease}` or `{key, status, error}` (the status and error a single renew would answer,
    `409 lease_not_held`). Entries may name the same key more than once (several leases of
    a semaphore); they are judged in order.

    The whole request is one transaction on servers whose storage allows it (both of the
    reference server's), and one unit for idempotency: a repeat with the same request id
    and the same body is answered the stored results, `Idempotent-Replayed: true`,
    changing nothing, with each lease that has ended since turned into a `409
    lease_not_held` result. Each lease in an answer is live by the server's clock when the
    answer is sent. A body that breaks the schema is `422` naming the entry
    (`leases[3].fencing_token: ...`); more than 500 entries is `422`, and a body over 256
    KiB is `413`. An entry may carry a new `label`, as a single renew may; 500 entries with
    the longest keys fit in 256 KiB with labels of up to 140 characters each, so send a
    batch of long labels in parts.

    Servers that predate this operation answer `404` (or `405`): renew one lease at a time
    there.

    Args:
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (RenewLeasesRequest): The body of a batch renewal (`POST /v1/leases/renew`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | RenewLeasesResult]
    """

    kwargs = _get_kwargs(
        body=body,
        x_request_id=x_request_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient | Client,
    body: RenewLeasesRequest,
    x_request_id: str | Unset = UNSET,
) -> Error | RenewLeasesResult | None:
    """Renew many leases of the project in one request.

     Renews up to 500 leases of the project at once, each entry judged exactly as
    `POST /v1/locks/{key}/renew` would judge it alone: the live lease of that key whose
    `owner_token` and `fencing_token` both match gets the expiry now + `ttl_seconds` and
    keeps its fencing token; anything else (expired, released, force-released, taken over,
    an older token of the same owner) is refused for that entry alone, and changes
    nothing. The answer is `200` with one result per entry, in the order sent: `{key,
    lease}` or `{key, status, error}` (the status and error a single renew would answer,
    `409 lease_not_held`). Entries may name the same key more than once (several leases of
    a semaphore); they are judged in order.

    The whole request is one transaction on servers whose storage allows it (both of the
    reference server's), and one unit for idempotency: a repeat with the same request id
    and the same body is answered the stored results, `Idempotent-Replayed: true`,
    changing nothing, with each lease that has ended since turned into a `409
    lease_not_held` result. Each lease in an answer is live by the server's clock when the
    answer is sent. A body that breaks the schema is `422` naming the entry
    (`leases[3].fencing_token: ...`); more than 500 entries is `422`, and a body over 256
    KiB is `413`. An entry may carry a new `label`, as a single renew may; 500 entries with
    the longest keys fit in 256 KiB with labels of up to 140 characters each, so send a
    batch of long labels in parts.

    Servers that predate this operation answer `404` (or `405`): renew one lease at a time
    there.

    Args:
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (RenewLeasesRequest): The body of a batch renewal (`POST /v1/leases/renew`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | RenewLeasesResult
    """

    return sync_detailed(
        client=client,
        body=body,
        x_request_id=x_request_id,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: RenewLeasesRequest,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | RenewLeasesResult]:
    """Renew many leases of the project in one request.

     Renews up to 500 leases of the project at once, each entry judged exactly as
    `POST /v1/locks/{key}/renew` would judge it alone: the live lease of that key whose
    `owner_token` and `fencing_token` both match gets the expiry now + `ttl_seconds` and
    keeps its fencing token; anything else (expired, released, force-released, taken over,
    an older token of the same owner) is refused for that entry alone, and changes
    nothing. The answer is `200` with one result per entry, in the order sent: `{key,
    lease}` or `{key, status, error}` (the status and error a single renew would answer,
    `409 lease_not_held`). Entries may name the same key more than once (several leases of
    a semaphore); they are judged in order.

    The whole request is one transaction on servers whose storage allows it (both of the
    reference server's), and one unit for idempotency: a repeat with the same request id
    and the same body is answered the stored results, `Idempotent-Replayed: true`,
    changing nothing, with each lease that has ended since turned into a `409
    lease_not_held` result. Each lease in an answer is live by the server's clock when the
    answer is sent. A body that breaks the schema is `422` naming the entry
    (`leases[3].fencing_token: ...`); more than 500 entries is `422`, and a body over 256
    KiB is `413`. An entry may carry a new `label`, as a single renew may; 500 entries with
    the longest keys fit in 256 KiB with labels of up to 140 characters each, so send a
    batch of long labels in parts.

    Servers that predate this operation answer `404` (or `405`): renew one lease at a time
    there.

    Args:
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (RenewLeasesRequest): The body of a batch renewal (`POST /v1/leases/renew`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | RenewLeasesResult]
    """

    kwargs = _get_kwargs(
        body=body,
        x_request_id=x_request_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    body: RenewLeasesRequest,
    x_request_id: str | Unset = UNSET,
) -> Error | RenewLeasesResult | None:
    """Renew many leases of the project in one request.

     Renews up to 500 leases of the project at once, each entry judged exactly as
    `POST /v1/locks/{key}/renew` would judge it alone: the live lease of that key whose
    `owner_token` and `fencing_token` both match gets the expiry now + `ttl_seconds` and
    keeps its fencing token; anything else (expired, released, force-released, taken over,
    an older token of the same owner) is refused for that entry alone, and changes
    nothing. The answer is `200` with one result per entry, in the order sent: `{key,
    lease}` or `{key, status, error}` (the status and error a single renew would answer,
    `409 lease_not_held`). Entries may name the same key more than once (several leases of
    a semaphore); they are judged in order.

    The whole request is one transaction on servers whose storage allows it (both of the
    reference server's), and one unit for idempotency: a repeat with the same request id
    and the same body is answered the stored results, `Idempotent-Replayed: true`,
    changing nothing, with each lease that has ended since turned into a `409
    lease_not_held` result. Each lease in an answer is live by the server's clock when the
    answer is sent. A body that breaks the schema is `422` naming the entry
    (`leases[3].fencing_token: ...`); more than 500 entries is `422`, and a body over 256
    KiB is `413`. An entry may carry a new `label`, as a single renew may; 500 entries with
    the longest keys fit in 256 KiB with labels of up to 140 characters each, so send a
    batch of long labels in parts.

    Servers that predate this operation answer `404` (or `405`): renew one lease at a time
    there.

    Args:
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (RenewLeasesRequest): The body of a batch renewal (`POST /v1/leases/renew`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | RenewLeasesResult
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
            x_request_id=x_request_id,
        )
    ).parsed
