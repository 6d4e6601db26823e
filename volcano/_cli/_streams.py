"""The commands that print as they go: `locks watch` (until Ctrl-C) and `locks list`.

`watch` prints one JSON object per line, flushed, for each state (get --json's fields). Ctrl-C
ends it with status 0, as does a reader that closes the pipe (`| head -1`): both are how a watch
is meant to end. `list` prints a table, or one JSON object per key and line with --json.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from . import _output
from ._exit import Exit

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterable

    import volcano

_COLUMNS = ("key", "held", "fencing_token", "holders", "waiters", "version", "labels", "modes")


def watch(client: volcano.Client, args: argparse.Namespace) -> int:
    """`volcano locks watch KEY [--after-version V]`."""
    with client.locks.watch(args.key, after_version=args.after_version) as states:
        return _lines(json.dumps(_output.state(state)) for state in states)


def list_keys(client: volcano.Client, args: argparse.Namespace) -> int:
    """`volcano locks list [PREFIX] [--json]`."""
    states = client.locks.list(args.key)
    if args.json:
        return _lines(json.dumps(_output.state(state)) for state in states)
    rows = [_row(state) for state in states]
    if rows:
        widths = [max(len(row[i]) for row in [list(_COLUMNS), *rows]) for i in range(len(_COLUMNS))]
        return _lines(
            "  ".join(f"{cell:<{width}}" for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in [list(_COLUMNS), *rows]
        )
    return Exit.OK


STREAMS: dict[str, Callable[[volcano.Client, argparse.Namespace], int]] = {
    "watch": watch,
    "list": list_keys,
}


def _row(state: volcano.LockState) -> list[str]:
    labels = ",".join(holder.label or "-" for holder in state.holders) or "-"
    modes = ",".join(holder.mode.value for holder in state.holders) or "-"
    values = (
        state.key,
        state.held,
        state.fencing_token,
        len(state.holders),
        state.waiters,
        state.version,
        labels,
        modes,
    )
    return [_output.human(value) for value in values]


def _lines(lines: Iterable[str]) -> int:
    """Print each line as it comes, flushed; Ctrl-C or a closed pipe ends it quietly (0)."""
    try:
        for line in lines:
            print(line, flush=True)
    except KeyboardInterrupt:
        return Exit.OK
    except BrokenPipeError:
        # Nobody reads any more: keep the interpreter's own flush at exit from failing too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return Exit.OK
    return Exit.OK
