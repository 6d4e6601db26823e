"""The command line's grammar: every command, option and help text, with examples.

Acquisition options are declared once (`_add_acquisition_options`) for `acquire` and `run`, so
that an option added there reaches both; `acquisition_options` turns them into the keyword
arguments of `Locks.acquire` and `Locks.with_lock`.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any, NoReturn

from .._version import __version__
from ._exit import Exit, Failure

if TYPE_CHECKING:
    from collections.abc import Sequence

    Commands = argparse._SubParsersAction["Parser"]  # typeshed's name for add_subparsers()

ENVIRONMENT = """\
environment:
  VOLCANO_ANON_KEY     the project's anon key (required)
  VOLCANO_SERVICE_KEY  the project's service key (required)
  VOLCANO_API_URL      the API's base URL (default: https://api.volcano.dev)
  VOLCANO_OWNER_TOKEN  renew, release: the owner token, if neither --token nor
                       --token-file gives it
"""

EXIT_STATUSES = """\
exit status:
  0    done
  64   usage error (or a --limit or mode other than the key's)
  69   server unreachable   70  unexpected answer
  75   lock held by another owner, every slot with --limit (and any --wait ran out)
  76   ownership lost
  77   credentials refused
"""

CHECK_EPILOG = f"""\
examples:
  volcano locks check nightly-report 7
  # a protected job refuses work fenced with an ended lease
  volcano locks check nightly-report "$VOLCANO_FENCING_TOKEN" || exit 1

exit status:
  0    the lease with this fencing token is live
  1    it is not live: released, expired, force-released, or never issued
  64   usage error        69  server unreachable   70  unexpected answer
  77   credentials refused

{ENVIRONMENT}"""

TOP_EXAMPLES = f"""\
examples:
  volcano locks run nightly-report -- ./make-report.sh
  volcano locks get nightly-report
  volcano locks acquire nightly-report --ttl 60 --json
  volcano locks run build-slots --limit 4 -- make build
  volcano locks run config-store --shared -- ./read-config.sh
  volcano locks watch scheduler
  volcano locks list report-

{ENVIRONMENT}"""

WATCH_DESCRIPTION = """\
Print KEY's state now, then its state after each change, one JSON object per line,
as they happen: a grant, a release, an expiry, a force release, a label changed by
a renewal (the fields are get --json's, with the key's version). Changes faster
than the long polls are folded into the latest state. Transport failures and
overloaded servers are retried (backing off up to 5 s); Ctrl-C ends it (exit 0)."""

WATCH_EPILOG = f"""\
examples:
  volcano locks watch scheduler
  # who leads, each time it changes
  volcano locks watch scheduler | jq -r '.holders[0].label // "vacant"'

exit status:
  0    ended by Ctrl-C (or its output was closed)
  64   usage error        69  server unreachable for good (5xx, 429 and transport
                              failures are retried)     70  unexpected answer
  77   credentials refused

{ENVIRONMENT}"""

LIST_DESCRIPTION = """\
List the keys that are held or waited for, in key order (those starting with
PREFIX when given): key, held, fencing token, holders (with their labels),
waiters and version. --json prints one JSON object per key and line (get --json's
fields). Pages are asked for as the listing goes; a key held throughout appears
exactly once."""

LIST_EPILOG = f"""\
examples:
  volcano locks list
  volcano locks list report-
  volcano locks list --json | jq -r 'select(.waiters > 0) | .key'

exit status:
  0    listed (perhaps nothing)
  64   usage error        69  server unreachable   70  unexpected answer
  77   credentials refused

{ENVIRONMENT}"""

RUN_DESCRIPTION = """\
Acquire KEY, run COMMAND while holding it, and release it when COMMAND exits.

The lease is renewed in the background. COMMAND gets VOLCANO_LOCK_KEY and
VOLCANO_FENCING_TOKEN in its environment and runs in a process group of its own;
SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to volcano are passed on to it. If
ownership is lost while it runs, COMMAND's process group gets SIGTERM, then
SIGKILL after --grace seconds, and volcano exits with 76. If volcano itself dies,
even by SIGKILL, a watchdog SIGKILLs COMMAND's process group at once, and the
lease is left to expire (nobody can release it); a process that leaves the group
(setsid) escapes both. When volcano's stdin is a terminal, COMMAND's stdin is
/dev/null (it does not own the terminal).

Run this while I am the leader: run it on every candidate with a long --wait and
a --label naming the machine. One runs COMMAND; the others wait in line, and the
first of them takes over as soon as it exits, or once its ttl has passed when it
crashed or was cut off (COMMAND has been stopped by then: it never runs on two
machines at once while the lease is held). VOLCANO_FENCING_TOKEN is the term:
higher for each new leader. `volcano locks watch KEY` shows who leads."""

RUN_EPILOG = f"""\
examples:
  volcano locks run nightly-report -- ./make-report.sh --date today
  volcano locks run nightly-report --ttl 120 --grace 30 -- python -m reports.nightly
  # take turns: wait up to 10 minutes for the lock instead of giving up at once
  volcano locks run nightly-report --wait 600 -- ./make-report.sh
  # at most 4 builds at once; the others wait in line for a slot
  volcano locks run build-slots --limit 4 --wait 3600 -- make build
  # readers run side by side; a writer waits for them, and readers after it wait for it
  volcano locks run config-store --shared --wait 60 -- ./read-config.sh
  volcano locks run config-store --wait 60 -- ./write-config.sh
  # crontab: only one machine makes the report; 75 means another one is on it
  0 3 * * *  volcano locks run nightly-report -- /srv/reports/nightly.sh
  # run this while I am the leader: every machine runs it; one leads, the
  # others wait in line and take over in turn when it ends, dies or is cut off
  volcano locks run scheduler --ttl 10 --wait 31536000 --label "$(hostname)" -- ./scheduler

exit status:
  COMMAND's own status when it ran to its end (128+N when signal N ended it)
  64   usage error (or a --limit or mode other than the key's)   69   server unreachable
  75   lock held by another owner, every slot with --limit (any --wait ran out)
  76   ownership lost while COMMAND ran
  77   credentials refused          126  COMMAND not executable   127  COMMAND not found

{ENVIRONMENT}"""


class Parser(argparse.ArgumentParser):
    """argparse, reporting a bad invocation as one line and exit status 64."""

    def error(self, message: str) -> NoReturn:
        raise Failure(Exit.USAGE, f"{message} (see {self.prog} --help)")


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse `argv`; `locks run` takes everything after the first `--` as its command.

    Raises:
        Failure: A usage error (exit status 64).
    """
    argv = list(argv)
    before, command = argv, []
    if "--" in argv:
        split = argv.index("--")
        before, command = argv[:split], argv[split + 1 :]
    args = _parser().parse_args(before)
    if args.handler is None:
        raise Failure(Exit.USAGE, args.missing)
    if args.handler == "run":
        if not command:
            raise Failure(
                Exit.USAGE,
                "give the command to run after --: volcano locks run KEY -- COMMAND [ARGS...]",
            )
        args.command = command
    elif command:
        raise Failure(Exit.USAGE, f"unexpected arguments after --: {' '.join(command)}")
    return args


def acquisition_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `acquire` / `with_lock` that the command line gave."""
    options: dict[str, Any] = {
        "ttl": args.ttl,
        "wait": args.wait,
        "limit": args.limit,
        "shared": args.shared,
        "label": args.label,
    }
    if getattr(args, "token", None) is not None:
        options["token"] = args.token
    if getattr(args, "request_id", None) is not None:
        options["request_id"] = args.request_id
    return options


def _parser() -> Parser:
    parser = Parser(
        prog="volcano",
        description="Volcano locks from the shell: inspect, take and release leases, "
        "or run a command while holding one.",
        epilog=TOP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.set_defaults(handler=None, missing="choose a command: locks (see volcano --help)")
    groups = parser.add_subparsers(title="commands", metavar="{locks}", parser_class=Parser)
    locks = groups.add_parser(
        "locks",
        help="acquire, inspect, renew, release, or run a command under a lock",
        description="Lock commands. Each prints the lease's fields; --json prints them as "
        "one JSON object for scripts.",
        epilog=TOP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    locks.set_defaults(
        missing="choose a command: get, acquire, renew, release, force-release, check, run, "
        "watch or list (see volcano locks --help)"
    )
    _add_lock_commands(
        locks.add_subparsers(
            title="commands",
            metavar="{get,acquire,renew,release,force-release,check,run,watch,list}",
            parser_class=Parser,
        )
    )
    return parser


def _add_lock_commands(commands: Commands) -> None:
    _command(
        commands,
        "get",
        "show whether KEY is held, until when, its fencing token, holders and waiters",
        _examples("get nightly-report", "get nightly-report --json"),
    )

    acquire = _command(
        commands,
        "acquire",
        "take a lease on KEY and print it (keep owner_token private)",
        _examples(
            "acquire nightly-report --ttl 60",
            "acquire nightly-report --ttl 60 --json | jq -r .fencing_token",
            "acquire build-slots --ttl 600 --limit 4",
            "acquire config-store --ttl 60 --shared",
        ),
    )
    _add_acquisition_options(acquire, ttl_default=None)
    acquire.add_argument(
        "--token",
        metavar="T",
        help="the owner token, a UUID (default: a new one); other users see it in ps",
    )
    acquire.add_argument(
        "--request-id",
        metavar="R",
        help="the request id, a UUID; repeat it to learn the outcome of an uncertain acquire",
    )

    renew = _command(
        commands,
        "renew",
        "extend a lease on KEY to --ttl seconds from now",
        _examples(
            "renew nightly-report --token-file lease.token --fencing-token 7 --ttl 60",
            "renew nightly-report --fencing-token 7 --ttl 60   # token in $VOLCANO_OWNER_TOKEN",
        ),
    )
    _add_lease_options(renew)
    renew.add_argument(
        "--ttl", type=_seconds, required=True, metavar="S", help="the new time to live in seconds"
    )

    release = _command(
        commands,
        "release",
        "end a lease on KEY",
        _examples(
            "release nightly-report --token-file - --fencing-token 7 < lease.token",
            "release nightly-report --fencing-token 7   # token in $VOLCANO_OWNER_TOKEN",
        ),
    )
    _add_lease_options(release)

    _command(
        commands,
        "force-release",
        "remove KEY's live leases, whoever holds them (administrative recovery only)",
        _examples("force-release nightly-report"),
        description="Remove every live lease of KEY without its owner token. The former "
        "holders may still be running: use it only where the protected resource checks "
        "fencing tokens.",
    )

    check = _command(
        commands,
        "check",
        "tell whether fencing token TOKEN of KEY is live (exit 0) or not (exit 1)",
        CHECK_EPILOG,
        description="Ask the server whether the lease with fencing token TOKEN of KEY is live "
        "now: the check a protected resource makes before it accepts work fenced with it. "
        "Exit status 0: live; 1: not live (released, expired, force-released or never "
        "issued).",
    )
    check.add_argument(
        "fencing_token", type=_fencing_token, metavar="TOKEN", help="the fencing token to check"
    )

    run = _command(
        commands,
        "run",
        "run a command while holding KEY",
        RUN_EPILOG,
        description=RUN_DESCRIPTION,
        json_output=False,
    )
    run.usage = (
        "%(prog)s KEY [--ttl S] [--limit N | --shared] [--wait S] [--label L] [--grace S] [-v]"
        " -- COMMAND [ARGS...]"
    )
    _add_acquisition_options(run, ttl_default=30)
    run.add_argument(
        "--grace",
        type=_zero_or_more_seconds,
        default=10.0,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL when ownership is lost (default: 10)",
    )

    watch = _command(
        commands,
        "watch",
        "print KEY's state, then one JSON line per change, until Ctrl-C",
        WATCH_EPILOG,
        description=WATCH_DESCRIPTION,
        json_output=False,
    )
    watch.add_argument(
        "--after-version",
        type=_version,
        default=None,
        metavar="V",
        help="start after version V (a state's version): print only what changes from it",
    )

    listing = commands.add_parser(
        "list",
        help="list the keys that are held or waited for (starting with PREFIX)",
        description=LIST_DESCRIPTION,
        epilog=LIST_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.set_defaults(handler="list")
    listing.add_argument(
        "key", metavar="PREFIX", nargs="?", default="", help="only keys starting with it"
    )
    listing.add_argument(
        "-v", "--verbose", action="store_true", help="log requests and retries on stderr"
    )
    listing.add_argument(
        "--json", action="store_true", help="print one JSON object per key and line"
    )


def _command(
    commands: Commands,
    name: str,
    summary: str,
    epilog: str,
    *,
    description: str | None = None,
    json_output: bool = True,
) -> Parser:
    """A lock command taking KEY, -v and (unless `json_output` is False) --json."""
    parser = commands.add_parser(
        name,
        help=summary,
        description=description or summary[0].upper() + summary[1:] + ".",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=name)
    parser.add_argument("key", metavar="KEY", help="the lock's name")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log requests and retries on stderr"
    )
    if json_output:
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object instead of text"
        )
    return parser


def _examples(*commands: str) -> str:
    lines = "\n".join(f"  volcano locks {command}" for command in commands)
    return f"examples:\n{lines}\n\n{EXIT_STATUSES}\n{ENVIRONMENT}"


def _add_acquisition_options(parser: Parser, *, ttl_default: float | None) -> None:
    """The options of acquire and run, turned into keywords by `acquisition_options`."""
    ttl_help = "the lease's time to live in seconds, 0.1 to 86400"
    parser.add_argument(
        "--ttl",
        type=_seconds,
        required=ttl_default is None,
        default=ttl_default,
        metavar="S",
        help=ttl_help if ttl_default is None else f"{ttl_help} (default: {ttl_default:g})",
    )
    parser.add_argument(
        "--limit",
        type=_limit,
        default=1,
        metavar="N",
        help="hold one of N slots: up to N holders of KEY at once, 1 to 1000 (default: 1, a "
        "lock); every holder of KEY must give the same N",
    )
    parser.add_argument(
        "--shared",
        action="store_true",
        help="hold a shared lease: beside other --shared holders of KEY, never beside an "
        "exclusive one (the default); waiting readers never pass a waiting writer",
    )
    parser.add_argument(
        "--wait",
        type=_zero_or_more_seconds,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for a held lock, in line with other waiters (default: 0, "
        "exit 75 at once)",
    )
    parser.add_argument(
        "--label",
        default=None,
        metavar="L",
        help="a public label for the lease, shown to everyone who reads KEY (a host name: "
        "up to 200 printable ASCII characters, never a secret)",
    )


def _add_lease_options(parser: Parser) -> None:
    """The two tokens that name a lease, for renew and release (see `_owner_token`)."""
    owner = parser.add_mutually_exclusive_group()
    owner.add_argument(
        "--token-file",
        metavar="PATH",
        help="read the lease's owner token from PATH (- for stdin); "
        "without this or --token, it is read from VOLCANO_OWNER_TOKEN",
    )
    owner.add_argument(
        "--token",
        metavar="T",
        help="the lease's owner token (from acquire); other users of the machine see a "
        "command line in ps: in scripts use --token-file or VOLCANO_OWNER_TOKEN",
    )
    parser.add_argument(
        "--fencing-token",
        required=True,
        type=_fencing_token,
        metavar="N",
        help="the lease's fencing token (from acquire)",
    )


def _zero_or_more_seconds(value: str) -> float:
    seconds = _number_of_seconds(value)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more seconds, got {value!r}")
    return seconds


def _seconds(value: str) -> float:
    seconds = _number_of_seconds(value)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected more than 0 seconds, got {value!r}")
    return seconds


def _number_of_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"expected seconds (a number), got {value!r}")
    return seconds


def _limit(value: str) -> int:
    # The range is the SDK's to judge (InvalidArgumentError: exit 64, naming it).
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 1000, got {value!r}")
    return int(value)


def _version(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 2**53 - 1:
        raise argparse.ArgumentTypeError(f"expected a version from 0 to 2^53-1, got {value!r}")
    return int(value)


def _fencing_token(value: str) -> int:
    if not value.isdigit() or not 1 <= int(value) <= 2**53 - 1:
        raise argparse.ArgumentTypeError(
            f"expected a fencing token from 1 to 2^53-1, got {value!r}"
        )
    return int(value)
