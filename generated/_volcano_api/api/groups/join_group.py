from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.join_request import JoinRequest
from ...models.membership import Membership
from ...types import UNSET, Response, Unset


def _get_kwargs(
    group: str,
    member: str,
    *,
    body: JoinRequest,
    x_request_id: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(x_request_id, Unset):
        headers["X-Request-Id"] = x_request_id

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/v1/groups/{group}/members/{member}/join".format(
            group=quote(str(group), safe=""),
            member=quote(str(member), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | Membership | None:
    if response.status_code == 200:
        response_200 = Membership.from_dict(response.json())

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
) -> Response[Error | Membership]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    group: str,
    member: str,
    *,
    client: AuthenticatedClient | Client,
    body: JoinRequest,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | Membership]:
    """Join a group as a member, with capabilities.

     Makes `member` a member of the group: a lease on the group in the name of
    `owner_token`, with the group's next fencing token, for `ttl_seconds` (renew it, or
    it leaves when its ttl runs out), carrying `capabilities` (none when absent or
    null). A member name that another owner token holds live is `409 member_exists`
    (tooz's `MemberAlreadyExist`), with `Retry-After` set to the whole seconds until it
    expires; joining again with the live member's own `owner_token` returns that same
    membership (same fencing token) with its expiry moved to now + `ttl_seconds` and its
    capabilities replaced, so a retry after a lost answer recovers it. A group that does
    not exist is `404 group_not_found` (tooz's `GroupNotCreated`). The body may be up to
    524,288 bytes (capabilities up to 65,538 bytes, however they are escaped).

    Args:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters,
            digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
        member (str): 1 to 200 characters, made as a key is, so that a member's name is also a
            label (the
            group's leader is shown by its member name).
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (JoinRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Membership]
    """

    kwargs = _get_kwargs(
        group=group,
        member=member,
        body=body,
        x_request_id=x_request_id,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    group: str,
    member: str,
    *,
    client: AuthenticatedClient | Client,
    body: JoinRequest,
    x_request_id: str | Unset = UNSET,
) -> Error | Membership | None:
    """Join a group as a member, with capabilities.

     Makes `member` a member of the group: a lease on the group in the name of
    `owner_token`, with the group's next fencing token, for `ttl_seconds` (renew it, or
    it leaves when its ttl runs out), carrying `capabilities` (none when absent or
    null). A member name that another owner token holds live is `409 member_exists`
    (tooz's `MemberAlreadyExist`), with `Retry-After` set to the whole seconds until it
    expires; joining again with the live member's own `owner_token` returns that same
    membership (same fencing token) with its expiry moved to now + `ttl_seconds` and its
    capabilities replaced, so a retry after a lost answer recovers it. A group that does
    not exist is `404 group_not_found` (tooz's `GroupNotCreated`). The body may be up to
    524,288 bytes (capabilities up to 65,538 bytes, however they are escaped).

    Args:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters,
            digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
        member (str): 1 to 200 characters, made as a key is, so that a member's name is also a
            label (the
            group's leader is shown by its member name).
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (JoinRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Membership
    """

    return sync_detailed(
        group=group,
        member=member,
        client=client,
        body=body,
        x_request_id=x_request_id,
    ).parsed


async def asyncio_detailed(
    group: str,
    member: str,
    *,
    client: AuthenticatedClient | Client,
    body: JoinRequest,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | Membership]:
    """Join a group as a member, with capabilities.

     Makes `member` a member of the group: a lease on the group in the name of
    `owner_token`, with the group's next fencing token, for `ttl_seconds` (renew it, or
    it leaves when its ttl runs out), carrying `capabilities` (none when absent or
    null). A member name that another owner token holds live is `409 member_exists`
    (tooz's `MemberAlreadyExist`), with `Retry-After` set to the whole seconds until it
    expires; joining again with the live member's own `owner_token` returns that same
    membership (same fencing token) with its expiry moved to now + `ttl_seconds` and its
    capabilities replaced, so a retry after a lost answer recovers it. A group that does
    not exist is `404 group_not_found` (tooz's `GroupNotCreated`). The body may be up to
    524,288 bytes (capabilities up to 65,538 bytes, however they are escaped).

    Args:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters,
            digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
        member (str): 1 to 200 characters, made as a key is, so that a member's name is also a
            label (the
            group's leader is shown by its member name).
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (JoinRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Membership]
    """

    kwargs = _get_kwargs(
        group=group,
        member=member,
        body=body,
        x_request_id=x_request_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    group: str,
    member: str,
    *,
    client: AuthenticatedClient | Client,
    body: JoinRequest,
    x_request_id: str | Unset = UNSET,
) -> Error | Membership | None:
    """Join a group as a member, with capabilities.

     Makes `member` a member of the group: a lease on the group in the name of
    `owner_token`, with the group's next fencing token, for `ttl_seconds` (renew it, or
    it leaves when its ttl runs out), carrying `capabilities` (none when absent or
    null). A member name that another owner token holds live is `409 member_exists`
    (tooz's `MemberAlreadyExist`), with `Retry-After` set to the whole seconds until it
    expires; joining again with the live member's own `owner_token` returns that same
    membership (same fencing token) with its expiry moved to now + `ttl_seconds` and its
    capabilities replaced, so a retry after a lost answer recovers it. A group that does
    not exist is `404 group_not_found` (tooz's `GroupNotCreated`). The body may be up to
    524,288 bytes (capabilities up to 65,538 bytes, however they are escaped).

    Args:
        group (str): 1 to 240 characters, made as a key is (a letter or digit, then letters,
            digits, `.`,
            `_`, `:` or `-`), so that the key of the group's election, `groups:` and the name, is
            a key.
        member (str): 1 to 200 characters, made as a key is, so that a member's name is also a
            label (the
            group's leader is shown by its member name).
        x_request_id (str | Unset): A UUID in its 8-4-4-4-12 hexadecimal form, in any letter case,
            kept exactly as spelled.
            No `format` here: generators turn `format: uuid` into a UUID type, which would change
            the spelling of a token sent in a body.
        body (JoinRequest):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Membership
    """

    return (
        await asyncio_detailed(
            group=group,
            member=member,
            client=client,
            body=body,
            x_request_id=x_request_id,
        )
    ).parsed
