from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.lock_state import LockState
from ...types import UNSET, Response, Unset


def _get_kwargs(
    key: str,
    *,
    after_version: int | Unset = UNSET,
    wait_seconds: float | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(x_request_id, Unset):
        headers["X-Request-Id"] = x_request_id

    params: dict[str, Any] = {}

    params["after_version"] = after_version

    params["wait_seconds"] = wait_seconds

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/locks/{key}".format(
            key=quote(str(key), safe=""),
        ),
        "params": params,
    }

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | LockState | None:
    if response.status_code == 200:
        response_200 = LockState.from_dict(response.json())

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
) -> Response[Error | LockState]:
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
    after_version: int | Unset = UNSET,
    wait_seconds: float | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | LockState]:
    """Inspect a key without acquiring it, or watch it change.

     Reports whether the key is held, until when, and its fencing token: the live lease's
    when held, else the last one issued, else null; its limit, its live leases (`holders`:
    the 20 that end soonest, soonest first, with their labels; `holder_count`: how many
    there are; `GET /v1/locks/{key}/holders` pages through them all), how many wait in
    line, and its `version`. It never reveals an owner token.

    With `after_version` and `wait_seconds` above 0 it is a long poll: the request stays
    open until the key's version differs from `after_version` (a grant, a release, an
    expiry, a force release, a label changed) or until `wait_seconds` pass, and answers
    `200` with the key's state either way. A version that differs already (a newer or an
    older one) is answered at once. To watch a key, poll again with the version of each
    answer. A server may end a poll sooner than asked (as it may a waiting acquire); the
    answer is then the same `200`.

    Args:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or
            `-`.
        after_version (int | Unset): A key's version: 0 for a key never acquired, then greater
            after each change of its
            holders (grant, release, expiry, force release, label change). It never goes back.
        wait_seconds (float | Unset):
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LockState]
    """

    kwargs = _get_kwargs(
        key=key,
        after_version=after_version,
        wait_seconds=wait_seconds,
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
    after_version: int | Unset = UNSET,
    wait_seconds: float | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Error | LockState | None:
    """Inspect a key without acquiring it, or watch it change.

     Reports whether the key is held, until when, and its fencing token: the live lease's
    when held, else the last one issued, else null; its limit, its live leases (`holders`:
    the 20 that end soonest, soonest first, with their labels; `holder_count`: how many
    there are; `GET /v1/locks/{key}/holders` pages through them all), how many wait in
    line, and its `version`. It never reveals an owner token.

    With `after_version` and `wait_seconds` above 0 it is a long poll: the request stays
    open until the key's version differs from `after_version` (a grant, a release, an
    expiry, a force release, a label changed) or until `wait_seconds` pass, and answers
    `200` with the key's state either way. A version that differs already (a newer or an
    older one) is answered at once. To watch a key, poll again with the version of each
    answer. A server may end a poll sooner than asked (as it may a waiting acquire); the
    answer is then the same `200`.

    Args:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or
            `-`.
        after_version (int | Unset): A key's version: 0 for a key never acquired, then greater
            after each change of its
            holders (grant, release, expiry, force release, label change). It never goes back.
        wait_seconds (float | Unset):
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LockState
    """

    return sync_detailed(
        key=key,
        client=client,
        after_version=after_version,
        wait_seconds=wait_seconds,
        x_request_id=x_request_id,
    ).parsed


async def asyncio_detailed(
    key: str,
    *,
    client: AuthenticatedClient | Client,
    after_version: int | Unset = UNSET,
    wait_seconds: float | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | LockState]:
    """Inspect a key without acquiring it, or watch it change.

     Reports whether the key is held, until when, and its fencing token: the live lease's
    when held, else the last one issued, else null; its limit, its live leases (`holders`:
    the 20 that end soonest, soonest first, with their labels; `holder_count`: how many
    there are; `GET /v1/locks/{key}/holders` pages through them all), how many wait in
    line, and its `version`. It never reveals an owner token.

    With `after_version` and `wait_seconds` above 0 it is a long poll: the request stays
    open until the key's version differs from `after_version` (a grant, a release, an
    expiry, a force release, a label changed) or until `wait_seconds` pass, and answers
    `200` with the key's state either way. A version that differs already (a newer or an
    older one) is answered at once. To watch a key, poll again with the version of each
    answer. A server may end a poll sooner than asked (as it may a waiting acquire); the
    answer is then the same `200`.

    Args:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or
            `-`.
        after_version (int | Unset): A key's version: 0 for a key never acquired, then greater
            after each change of its
            holders (grant, release, expiry, force release, label change). It never goes back.
        wait_seconds (float | Unset):
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | LockState]
    """

    kwargs = _get_kwargs(
        key=key,
        after_version=after_version,
        wait_seconds=wait_seconds,
        x_request_id=x_request_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    key: str,
    *,
    client: AuthenticatedClient | Client,
    after_version: int | Unset = UNSET,
    wait_seconds: float | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Error | LockState | None:
    """Inspect a key without acquiring it, or watch it change.

     Reports whether the key is held, until when, and its fencing token: the live lease's
    when held, else the last one issued, else null; its limit, its live leases (`holders`:
    the 20 that end soonest, soonest first, with their labels; `holder_count`: how many
    there are; `GET /v1/locks/{key}/holders` pages through them all), how many wait in
    line, and its `version`. It never reveals an owner token.

    With `after_version` and `wait_seconds` above 0 it is a long poll: the request stays
    open until the key's version differs from `after_version` (a grant, a release, an
    expiry, a force release, a label changed) or until `wait_seconds` pass, and answers
    `200` with the key's state either way. A version that differs already (a newer or an
    older one) is answered at once. To watch a key, poll again with the version of each
    answer. A server may end a poll sooner than asked (as it may a waiting acquire); the
    answer is then the same `200`.

    Args:
        key (str): 1 to 255 characters; a letter or digit, then letters, digits, `.`, `_`, `:` or
            `-`.
        after_version (int | Unset): A key's version: 0 for a key never acquired, then greater
            after each change of its
            holders (grant, release, expiry, force release, label change). It never goes back.
        wait_seconds (float | Unset):
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | LockState
    """

    return (
        await asyncio_detailed(
            key=key,
            client=client,
            after_version=after_version,
            wait_seconds=wait_seconds,
            x_request_id=x_request_id,
        )
    ).parsed
