from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.group_list import GroupList
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    prefix: str | Unset = UNSET,
    after: str | Unset = UNSET,
    limit: int | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(x_request_id, Unset):
        headers["X-Request-Id"] = x_request_id

    params: dict[str, Any] = {}

    params["prefix"] = prefix

    params["after"] = after

    params["limit"] = limit

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/groups",
        "params": params,
    }

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | GroupList | None:
    if response.status_code == 200:
        response_200 = GroupList.from_dict(response.json())

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
) -> Response[Error | GroupList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    prefix: str | Unset = UNSET,
    after: str | Unset = UNSET,
    limit: int | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | GroupList]:
    """List the project's groups.

     The project's groups (created and not deleted), in name order (byte order), each
    with its state as `GET /v1/groups/{group}` reports it; at most `limit` of them after
    the name `after`, among those starting with `prefix`. `next` is the `after` of the
    following page, or null when this page is the last: go on until `next` is null. A
    group that exists throughout a listing appears in exactly one page; one created or
    deleted meanwhile may or may not.

    Args:
        prefix (str | Unset): Up to 255 of the characters a key is made of (letters, digits, `.`,
            `_`, `:`, `-`).
        after (str | Unset): Up to 255 of the characters a key is made of (letters, digits, `.`,
            `_`, `:`, `-`).
        limit (int | Unset):
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | GroupList]
    """

    kwargs = _get_kwargs(
        prefix=prefix,
        after=after,
        limit=limit,
        x_request_id=x_request_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient | Client,
    prefix: str | Unset = UNSET,
    after: str | Unset = UNSET,
    limit: int | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Error | GroupList | None:
    """List the project's groups.

     The project's groups (created and not deleted), in name order (byte order), each
    with its state as `GET /v1/groups/{group}` reports it; at most `limit` of them after
    the name `after`, among those starting with `prefix`. `next` is the `after` of the
    following page, or null when this page is the last: go on until `next` is null. A
    group that exists throughout a listing appears in exactly one page; one created or
    deleted meanwhile may or may not.

    Args:
        prefix (str | Unset): Up to 255 of the characters a key is made of (letters, digits, `.`,
            `_`, `:`, `-`).
        after (str | Unset): Up to 255 of the characters a key is made of (letters, digits, `.`,
            `_`, `:`, `-`).
        limit (int | Unset):
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | GroupList
    """

    return sync_detailed(
        client=client,
        prefix=prefix,
        after=after,
        limit=limit,
        x_request_id=x_request_id,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    prefix: str | Unset = UNSET,
    after: str | Unset = UNSET,
    limit: int | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | GroupList]:
    """List the project's groups.

     The project's groups (created and not deleted), in name order (byte order), each
    with its state as `GET /v1/groups/{group}` reports it; at most `limit` of them after
    the name `after`, among those starting with `prefix`. `next` is the `after` of the
    following page, or null when this page is the last: go on until `next` is null. A
    group that exists throughout a listing appears in exactly one page; one created or
    deleted meanwhile may or may not.

    Args:
        prefix (str | Unset): Up to 255 of the characters a key is made of (letters, digits, `.`,
            `_`, `:`, `-`).
        after (str | Unset): Up to 255 of the characters a key is made of (letters, digits, `.`,
            `_`, `:`, `-`).
        limit (int | Unset):
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | GroupList]
    """

    kwargs = _get_kwargs(
        prefix=prefix,
        after=after,
        limit=limit,
        x_request_id=x_request_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    prefix: str | Unset = UNSET,
    after: str | Unset = UNSET,
    limit: int | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Error | GroupList | None:
    """List the project's groups.

     The project's groups (created and not deleted), in name order (byte order), each
    with its state as `GET /v1/groups/{group}` reports it; at most `limit` of them after
    the name `after`, among those starting with `prefix`. `next` is the `after` of the
    following page, or null when this page is the last: go on until `next` is null. A
    group that exists throughout a listing appears in exactly one page; one created or
    deleted meanwhile may or may not.

    Args:
        prefix (str | Unset): Up to 255 of the characters a key is made of (letters, digits, `.`,
            `_`, `:`, `-`).
        after (str | Unset): Up to 255 of the characters a key is made of (letters, digits, `.`,
            `_`, `:`, `-`).
        limit (int | Unset):
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | GroupList
    """

    return (
        await asyncio_detailed(
            client=client,
            prefix=prefix,
            after=after,
            limit=limit,
            x_request_id=x_request_id,
        )
    ).parsed
