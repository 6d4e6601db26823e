"""Where renew and release find the lease's owner token: a file, the environment, or --token.

An owner token is the lease's credential, and a command line is public: every user of the
machine can read it in `ps` (/proc/PID/cmdline). A script should hand the token over in a file
(`--token-file PATH`, `-` for stdin), which is as private as its mode, or in VOLCANO_OWNER_TOKEN
(on Linux /proc/PID/environ is readable by the process's user and root alone); `--token T` is
kept for people at a terminal. The two options exclude each other (the parser says so), and
either beats the environment, as options do.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._exit import Exit, Failure

if TYPE_CHECKING:
    import argparse

VARIABLE = "VOLCANO_OWNER_TOKEN"

_LONGEST = 1024
"""More than any owner token (a UUID is 36 characters): a longer file is something else, and
reading stops there (`--token-file /dev/zero` would never end)."""


def owner_token(args: argparse.Namespace) -> str:
    """The owner token that `args` and the environment name.

    Raises:
        Failure: No source names one, or its file is unreadable, empty or too long (status 64).
    """
    if args.token is not None:
        return str(args.token)
    if args.token_file is not None:
        return _read(args.token_file)
    token = os.environ.get(VARIABLE)
    if token is None:
        raise Failure(
            Exit.USAGE,
            f"no owner token: give --token-file PATH (- for stdin) or set {VARIABLE} "
            "(--token T works too, but shows the token to other users in ps)",
        )
    if not token:
        raise Failure(Exit.USAGE, f"{VARIABLE} is set but empty")
    return token


def _read(path: str) -> str:
    """The token in file `path` (`-`: stdin), without the whitespace around it (a newline)."""
    where = "stdin" if path == "-" else path
    try:
        with open(0 if path == "-" else path, "rb", closefd=path != "-") as file:
            text = file.read(_LONGEST + 1)
    except OSError as error:
        raise Failure(
            Exit.USAGE, f"cannot read the owner token from {where}: {error.strerror}"
        ) from None
    if len(text) > _LONGEST:
        raise Failure(Exit.USAGE, f"{where} holds more than an owner token ({_LONGEST}+ bytes)")
    token = text.strip()
    if not token:
        raise Failure(Exit.USAGE, f"no owner token in {where}: it is empty")
    # Not UTF-8: the SDK then says it is not a UUID, without showing it.
    return token.decode(errors="replace")
