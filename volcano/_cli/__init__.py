"""`volcano`, the command-line tool: Volcano locks from the shell.

    volcano locks get KEY [--json]
    volcano locks acquire KEY --ttl S [--limit N | --shared] [--wait S] [--label L]
                          [--token T] [--request-id R] [--json]
    volcano locks renew KEY [--token-file PATH | --token T] --fencing-token N --ttl S [--json]
    volcano locks release KEY [--token-file PATH | --token T] --fencing-token N [--json]
    volcano locks force-release KEY [--json]
    volcano locks check KEY TOKEN [--json]          (exit 0: live, 1: not live)
    volcano locks run KEY [--ttl 30] [--limit 1 | --shared] [--wait 0] [--label L] [--grace 10]
                      -- COMMAND
    volcano locks watch KEY [--after-version V]     (one JSON line per change, until Ctrl-C)
    volcano locks list [PREFIX] [--json]

It reads VOLCANO_ANON_KEY, VOLCANO_SERVICE_KEY and VOLCANO_API_URL like `volcano.Client`
(and VOLCANO_OWNER_TOKEN for renew and release), and uses nothing but the SDK's public API.
Every failure is one line on stderr, `volcano: ...`, and an exit status from `_exit` (never a
traceback).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import volcano

from . import _output
from ._commands import COMMANDS
from ._exit import Exit, Failure, failure
from ._logs import HeldWarnings, configure_logging
from ._parser import parse
from ._streams import STREAMS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

__all__ = ["main"]

_KEY_VARIABLES = ("VOLCANO_ANON_KEY", "VOLCANO_SERVICE_KEY")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        held = configure_logging(verbose=args.verbose)
        return _dispatch(args, held)
    except Failure as stop:
        print(f"volcano: {stop.message}", file=sys.stderr)
        return stop.status
    except KeyboardInterrupt:
        print("volcano: interrupted", file=sys.stderr)
        return Exit.SIGNALLED + 2
    except Exception as error:  # noqa: BLE001 - a bug here is still one line, never a traceback
        print(f"volcano: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        return Exit.UNEXPECTED


def _dispatch(args: argparse.Namespace, held: HeldWarnings) -> int:
    with _client() as client:
        try:
            if args.handler == "run":
                from ._run import run

                return run(client, args, held)
            if args.handler in STREAMS:
                return STREAMS[args.handler](client, args)
            fields = COMMANDS[args.handler](client, args)
        except volcano.Error as error:
            limit, shared = getattr(args, "limit", 1), getattr(args, "shared", False)
            raise failure(
                error, key=args.key, api_url=client.api_url, limit=limit, shared=shared
            ) from None
    print(_output.render(fields, as_json=args.json))
    return Exit.NOT_LIVE if fields.get("live") is False else Exit.OK


def _client() -> volcano.Client:
    missing = [name for name in _KEY_VARIABLES if not os.environ.get(name)]
    if missing:
        raise Failure(
            Exit.USAGE,
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: export the "
            "keys printed by `volcano-server keys create`, or your project's keys",
        )
    try:
        return volcano.Client()
    except volcano.InvalidArgumentError as error:
        raise Failure(Exit.USAGE, str(error)) from None
