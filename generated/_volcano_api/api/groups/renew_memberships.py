from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.renew_memberships_request import RenewMembershipsRequest
from ...models.renew_memberships_result import RenewMembershipsResult
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    body: RenewMembershipsRequest,
    x_request_id: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(x_request_id, Unset):
        headers["X-Request-Id"] = x_request_id

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/members/renew",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | RenewMembershipsResult | None:
    if response.status_code == 200:
        response_200 = RenewMembershipsResult.from_dict(response.json())

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
) -> Response[Error | RenewMembershipsResult]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: RenewMembershipsRequest,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | RenewMembershipsResult]:
    """Renew many memberships of the project in one request.

     Renews up to 500 memberships of the project at once (of one group or several), each
    entry judged exactly as `POST /v1/groups/{group}/members/{member}/renew` would judge
    it alone, in one transaction and as one unit for idempotency, as `POST
    /v1/leases/renew` does for leases of keys: the answer is `200` with one result per
    entry, in the order sent, `{group, member, membership}` or `{group, member, status,
    error}` (`409 lease_not_held`, or `404 group_not_found`). Each membership in an
    answer is live by the server's clock when the answer is sent; a repeat of the
    request id refuses, in its place, each one that has ended since. The body may be up
    to 524,288 bytes: 500 entries of the longest names fit.

    Args:
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (RenewMembershipsRequest): The body of a batch renewal of memberships (`POST
            /v1/members/renew`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | RenewMembershipsResult]
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
    body: RenewMembershipsRequest,
    x_request_id: str | Unset = UNSET,
) -> Error | RenewMembershipsResult | None:
    """Renew many memberships of the project in one request.

     Renews up to 500 memberships of the project at once (of one group or several), each
    entry judged exactly as `POST /v1/groups/{group}/members/{member}/renew` would judge
    it alone, in one transaction and as one unit for idempotency, as `POST
    /v1/leases/renew` does for leases of keys: the answer is `200` with one result per
    entry, in the order sent, `{group, member, membership}` or `{group, member, status,
    error}` (`409 lease_not_held`, or `404 group_not_found`). Each membership in an
    answer is live by the server's clock when the answer is sent; a repeat of the
    request id refuses, in its place, each one that has ended since. The body may be up
    to 524,288 bytes: 500 entries of the longest names fit.

    Args:
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (RenewMembershipsRequest): The body of a batch renewal of memberships (`POST
            /v1/members/renew`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | RenewMembershipsResult
    """

    return sync_detailed(
        client=client,
        body=body,
        x_request_id=x_request_id,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    body: RenewMembershipsRequest,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | RenewMembershipsResult]:
    """Renew many memberships of the project in one request.

     Renews up to 500 memberships of the project at once (of one group or several), each
    entry judged exactly as `POST /v1/groups/{group}/members/{member}/renew` would judge
    it alone, in one transaction and as one unit for idempotency, as `POST
    /v1/leases/renew` does for leases of keys: the answer is `200` with one result per
    entry, in the order sent, `{group, member, membership}` or `{group, member, status,
    error}` (`409 lease_not_held`, or `404 group_not_found`). Each membership in an
    answer is live by the server's clock when the answer is sent; a repeat of the
    request id refuses, in its place, each one that has ended since. The body may be up
    to 524,288 bytes: 500 entries of the longest names fit.

    Args:
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (RenewMembershipsRequest): The body of a batch renewal of memberships (`POST
            /v1/members/renew`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | RenewMembershipsResult]
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
    body: RenewMembershipsRequest,
    x_request_id: str | Unset = UNSET,
) -> Error | RenewMembershipsResult | None:
    """Renew many memberships of the project in one request.

     Renews up to 500 memberships of the project at once (of one group or several), each
    entry judged exactly as `POST /v1/groups/{group}/members/{member}/renew` would judge
    it alone, in one transaction and as one unit for idempotency, as `POST
    /v1/leases/renew` does for leases of keys: the answer is `200` with one result per
    entry, in the order sent, `{group, member, membership}` or `{group, member, status,
    error}` (`409 lease_not_held`, or `404 group_not_found`). Each membership in an
    answer is live by the server's clock when the answer is sent; a repeat of the
    request id refuses, in its place, each one that has ended since. The body may be up
    to 524,288 bytes: 500 entries of the longest names fit.

    Args:
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (RenewMembershipsRequest): The body of a batch renewal of memberships (`POST
            /v1/members/renew`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | RenewMembershipsResult
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
            x_request_id=x_request_id,
        )
    ).parsed
