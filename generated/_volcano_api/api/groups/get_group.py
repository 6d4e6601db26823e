from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.group_state import GroupState
from ...types import UNSET, Response, Unset


def _get_kwargs(
    group: str,
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
        "url": "/v1/groups/{group}".format(
            group=quote(str(group), safe=""),
        ),
        "params": params,
    }

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | GroupState | None:
    if response.status_code == 200:
        response_200 = GroupState.from_dict(response.json())

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
) -> Response[Error | GroupState]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    group: str,
    *,
    client: AuthenticatedClient | Client,
    after_version: int | Unset = UNSET,
    wait_seconds: float | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | GroupState]:
    """Inspect a group, or watch its membership change.

     The group's version, its last fencing token and how many members it has (live:
    joined, and neither left nor past their expiry). A group that does not exist (never
    created, or deleted) is `404 group_not_found`.

    With `after_version` and `wait_seconds` above 0 it is a long poll, as a key's get is:
    the request stays open until the group's version differs from `after_version` (a
    member joined, left, was removed, expired or changed its capabilities; the group was
    deleted) or until `wait_seconds` pass, and answers with the group's state either way
    (`404 group_not_found` once it is deleted). A version that differs already is
    answered at once, and so is a group that does not exist. To watch a group's
    membership, poll again with the version of each answer and list its members when it
    moves.

    Args:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters,
            digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
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
        Response[Error | GroupState]
    """

    kwargs = _get_kwargs(
        group=group,
        after_version=after_version,
        wait_seconds=wait_seconds,
        x_request_id=x_request_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    group: str,
    *,
    client: AuthenticatedClient | Client,
    after_version: int | Unset = UNSET,
    wait_seconds: float | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Error | GroupState | None:
    """Inspect a group, or watch its membership change.

     The group's version, its last fencing token and how many members it has (live:
    joined, and neither left nor past their expiry). A group that does not exist (never
    created, or deleted) is `404 group_not_found`.

    With `after_version` and `wait_seconds` above 0 it is a long poll, as a key's get is:
    the request stays open until the group's version differs from `after_version` (a
    member joined, left, was removed, expired or changed its capabilities; the group was
    deleted) or until `wait_seconds` pass, and answers with the group's state either way
    (`404 group_not_found` once it is deleted). A version that differs already is
    answered at once, and so is a group that does not exist. To watch a group's
    membership, poll again with the version of each answer and list its members when it
    moves.

    Args:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters,
            digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
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
        Error | GroupState
    """

    return sync_detailed(
        group=group,
        client=client,
        after_version=after_version,
        wait_seconds=wait_seconds,
        x_request_id=x_request_id,
    ).parsed


async def asyncio_detailed(
    group: str,
    *,
    client: AuthenticatedClient | Client,
    after_version: int | Unset = UNSET,
    wait_seconds: float | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | GroupState]:
    """Inspect a group, or watch its membership change.

     The group's version, its last fencing token and how many members it has (live:
    joined, and neither left nor past their expiry). A group that does not exist (never
    created, or deleted) is `404 group_not_found`.

    With `after_version` and `wait_seconds` above 0 it is a long poll, as a key's get is:
    the request stays open until the group's version differs from `after_version` (a
    member joined, left, was removed, expired or changed its capabilities; the group was
    deleted) or until `wait_seconds` pass, and answers with the group's state either way
    (`404 group_not_found` once it is deleted). A version that differs already is
    answered at once, and so is a group that does not exist. To watch a group's
    membership, poll again with the version of each answer and list its members when it
    moves.

    Args:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters,
            digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
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
        Response[Error | GroupState]
    """

    kwargs = _get_kwargs(
        group=group,
        after_version=after_version,
        wait_seconds=wait_seconds,
        x_request_id=x_request_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    group: str,
    *,
    client: AuthenticatedClient | Client,
    after_version: int | Unset = UNSET,
    wait_seconds: float | Unset = UNSET,
    x_request_id: str | Unset = UNSET,
) -> Error | GroupState | None:
    """Inspect a group, or watch its membership change.

     The group's version, its last fencing token and how many members it has (live:
    joined, and neither left nor past their expiry). A group that does not exist (never
    created, or deleted) is `404 group_not_found`.

    With `after_version` and `wait_seconds` above 0 it is a long poll, as a key's get is:
    the request stays open until the group's version differs from `after_version` (a
    member joined, left, was removed, expired or changed its capabilities; the group was
    deleted) or until `wait_seconds` pass, and answers with the group's state either way
    (`404 group_not_found` once it is deleted). A version that differs already is
    answered at once, and so is a group that does not exist. To watch a group's
    membership, poll again with the version of each answer and list its members when it
    moves.

    Args:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters,
            digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
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
        Error | GroupState
    """

    return (
        await asyncio_detailed(
            group=group,
            client=client,
            after_version=after_version,
            wait_seconds=wait_seconds,
            x_request_id=x_request_id,
        )
    ).parsed
