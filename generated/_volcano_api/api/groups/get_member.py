from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.group_member import GroupMember
from ...types import UNSET, Response, Unset


def _get_kwargs(
    group: str,
    member: str,
    *,
    x_request_id: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(x_request_id, Unset):
        headers["X-Request-Id"] = x_request_id

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/v1/groups/{group}/members/{member}".format(
            group=quote(str(group), safe=""),
            member=quote(str(member), safe=""),
        ),
    }

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | GroupMember | None:
    if response.status_code == 200:
        response_200 = GroupMember.from_dict(response.json())

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
) -> Response[Error | GroupMember]:
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
    x_request_id: str | Unset = UNSET,
) -> Response[Error | GroupMember]:
    """Inspect one member and its capabilities.

     The live member's fencing token, expiry and capabilities; never its owner token. A
    member that has not joined (or left, was removed or expired) is `404
    member_not_found` (tooz's `MemberNotJoined`); a group that does not exist, `404
    group_not_found`.

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

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | GroupMember]
    """

    kwargs = _get_kwargs(
        group=group,
        member=member,
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
    x_request_id: str | Unset = UNSET,
) -> Error | GroupMember | None:
    """Inspect one member and its capabilities.

     The live member's fencing token, expiry and capabilities; never its owner token. A
    member that has not joined (or left, was removed or expired) is `404
    member_not_found` (tooz's `MemberNotJoined`); a group that does not exist, `404
    group_not_found`.

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

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | GroupMember
    """

    return sync_detailed(
        group=group,
        member=member,
        client=client,
        x_request_id=x_request_id,
    ).parsed


async def asyncio_detailed(
    group: str,
    member: str,
    *,
    client: AuthenticatedClient | Client,
    x_request_id: str | Unset = UNSET,
) -> Response[Error | GroupMember]:
    """Inspect one member and its capabilities.

     The live member's fencing token, expiry and capabilities; never its owner token. A
    member that has not joined (or left, was removed or expired) is `404
    member_not_found` (tooz's `MemberNotJoined`); a group that does not exist, `404
    group_not_found`.

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

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | GroupMember]
    """

    kwargs = _get_kwargs(
        group=group,
        member=member,
        x_request_id=x_request_id,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    group: str,
    member: str,
    *,
    client: AuthenticatedClient | Client,
    x_request_id: str | Unset = UNSET,
) -> Error | GroupMember | None:
    """Inspect one member and its capabilities.

     The live member's fencing token, expiry and capabilities; never its owner token. A
    member that has not joined (or left, was removed or expired) is `404
    member_not_found` (tooz's `MemberNotJoined`); a group that does not exist, `404
    group_not_found`.

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

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | GroupMember
    """

    return (
        await asyncio_detailed(
            group=group,
            member=member,
            client=client,
            x_request_id=x_request_id,
        )
    ).parsed
