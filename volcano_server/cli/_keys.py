"""`volcano-server keys ...`: create, rotate, list and revoke keys, and read their audit trail.

Secrets are shown once, by create and rotate, as VOLCANO_*=... lines a shell, systemd's
`EnvironmentFile=`, `docker --env-file` or a secret store can take: on stdout, or (create
`--output FILE`) in a file only its owner can read, written whole or not at all. create adds
`VOLCANO_API_URL`, the server the keys belong to, so that loading the lines never leaves the SDK
aiming a local project's keys at the hosted default. Nothing else ever shows a key or its hash.
Every change is written to the audit trail with the operator who made it (`user@host` of the
process running the command).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ..http._auth import hash_key, make_project_keys, new_service_key
from ..storage import Storage, StorageUnavailable, UnknownProject, key_id
from ._fatal import Fatal

__all__ = ["KEY_COMMANDS"]


def _create(args: argparse.Namespace, storage: Storage) -> int:
    if args.output is None:
        with _Closing(storage):
            keys = make_project_keys(storage, args.project, actor=_actor())
        print(_env_lines(keys.anon_key, keys.service_key, args.api_url), end="")
        return 0
    # The file is made (mode 0600) before the keys, so an unwritable path costs no keys.
    with _private_file(Path(args.output)) as write, _Closing(storage):
        keys = make_project_keys(storage, args.project, actor=_actor())
        write(_env_lines(keys.anon_key, keys.service_key, args.api_url))
    shown = args.output if "/" in args.output else f"./{args.output}"
    print(
        f"wrote the keys of {args.project} and VOLCANO_API_URL={args.api_url} to {args.output}"
        f" (readable only by you); load them with: set -a; . {shown}; set +a",
        file=sys.stderr,
    )
    return 0


def _env_lines(anon_key: str, service_key: str, api_url: str) -> str:
    return (
        f"VOLCANO_ANON_KEY={anon_key}\n"
        f"VOLCANO_SERVICE_KEY={service_key}\n"
        f"VOLCANO_API_URL={api_url}\n"
    )


@contextlib.contextmanager
def _private_file(path: Path) -> Iterator[Callable[[str], object]]:
    """Yield a writer of `path`'s new contents, which replace `path` only if the block succeeds.

    They go to a temporary file beside it, of mode 0600 as mkstemp makes it, so the keys are
    never readable by others, not even for a moment, and `path` is never half written.
    """
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise Fatal(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "w") as file:
            yield file.write
            try:
                file.flush()
                os.fsync(file.fileno())
                os.replace(temporary, path)
            except OSError as exc:
                raise Fatal(f"cannot write {path}: {exc.strerror}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def _rotate(args: argparse.Namespace, storage: Storage) -> int:
    service_key = new_service_key()
    with _Closing(storage):
        try:
            storage.add_service_key(args.project, hash_key(service_key), actor=_actor())
        except UnknownProject:
            raise Fatal(f"no project is named {args.project!r} (see keys list)") from None
    print(f"VOLCANO_SERVICE_KEY={service_key}")
    print(
        f"new service key {key_id(hash_key(service_key))} for {args.project}; the old ones work"
        " until you revoke them: volcano-server keys revoke ID",
        file=sys.stderr,
    )
    return 0


def _list(args: argparse.Namespace, storage: Storage) -> int:
    with _Closing(storage):
        keys = storage.list_keys(args.project)
    _table(
        ("ID", "KIND", "PROJECT", "CREATED", "LAST USED", "REVOKED"),
        [
            (
                key.key_id,
                key.kind,
                key.project,
                _time(key.created_at_us),
                _time(key.last_used_at_us),
                _time(key.revoked_at_us),
            )
            for key in keys
        ],
    )
    return 0


def _revoke(args: argparse.Namespace, storage: Storage) -> int:
    with _Closing(storage):
        found = storage.revoke_key(args.key_id, actor=_actor())
    if found is None:
        raise Fatal(f"no key has the id {args.key_id!r} (see keys list)")
    key, revoked_now = found
    what = "revoked" if revoked_now else "was already revoked at"
    when = "" if revoked_now else f" {_time(key.revoked_at_us)}"
    print(f"{key.key_id} ({key.kind} key of {key.project}) {what}{when}")
    return 0


def _audit(args: argparse.Namespace, storage: Storage) -> int:
    with _Closing(storage):
        events = storage.key_events(args.project)
    _table(
        ("TIME", "ACTION", "ID", "KIND", "PROJECT", "BY"),
        [(_time(e.at_us), e.action, e.key_id, e.kind, e.project, e.actor) for e in events],
    )
    return 0


KEY_COMMANDS: dict[str, Callable[[argparse.Namespace, Storage], int]] = {
    "create": _create,
    "rotate": _rotate,
    "list": _list,
    "revoke": _revoke,
    "audit": _audit,
}


class _Closing:
    """Close the storage afterwards; a database that cannot serve is one line, not a traceback."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: object
    ) -> None:
        self._storage.close()
        if isinstance(exc, StorageUnavailable):
            raise Fatal(f"the database cannot serve: {exc}") from None


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container, say)
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def _time(us: int | None) -> str:
    if us is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(us // 1_000_000))


def _table(header: Sequence[str], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [tuple(header), *rows]) for i in range(len(header))]
    for row in [tuple(header), *rows]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
