"""The `volcano-server` command: manage project keys, migrate, serve.

    volcano-server keys create --project NAME [--api-url URL] [--output FILE] [--db URL]
    volcano-server keys rotate --project NAME [--db URL]
    volcano-server keys list [--project NAME] [--db URL]
    volcano-server keys revoke ID [--db URL]
    volcano-server keys audit [--project NAME] [--db URL]
    volcano-server migrate [--db URL]
    volcano-server serve [--host 127.0.0.1] [--port 8787] [--db URL] [...]
    volcano-server serve --daemon --log-file FILE [--pid-file FILE] [...]   # prints the URL

`--db` defaults to $VOLCANO_DATABASE_URL, else sqlite:///volcano.db in the working directory.
Every failure is one line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import string
import sys
import urllib.parse
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from .._config import Limits, Quotas, ServerConfig, WaitingSettings
from ..storage import (
    DEFAULT_DATABASE_URL,
    Storage,
    StorageUnavailable,
    Synchronous,
    UnsafeDatabase,
    UnsupportedDatabaseURL,
    open_storage,
    redact_url,
)
from ._fatal import Fatal

if TYPE_CHECKING:
    from ._daemon import Announce

__all__ = ["main"]

log = logging.getLogger("volcano_server")

_DEFAULT_API_URL = "http://127.0.0.1:8787"
# What a VOLCANO_API_URL line may hold and still be read alike by a shell's `.`, systemd's
# EnvironmentFile= and docker's --env-file: no quotes, spaces, `$`, `;` or `&` to interpret.
_URL_CHARACTERS = frozenset(string.ascii_letters + string.digits + "-._~:/%[]")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None or (args.command == "keys" and args.keys_command is None):
        print(
            "volcano-server: error: choose a command: keys, migrate or serve (see --help)",
            file=sys.stderr,
        )
        return 2
    from ..telemetry._logs import configure_logging

    configure_logging(getattr(args, "log_level", "info"), getattr(args, "log_format", "text"))
    try:
        if args.command == "keys":
            from ._keys import KEY_COMMANDS

            return KEY_COMMANDS[args.keys_command](args, _open(_database_url(args)))
        return {"migrate": _migrate, "serve": _serve}[args.command](args)
    except KeyboardInterrupt:
        return 130
    except Fatal as exc:
        print(f"volcano-server: {exc}", file=sys.stderr)
        return 1


class _Parser(argparse.ArgumentParser):
    """argparse, reporting a bad invocation in one line instead of the whole usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="volcano-server", description="The Volcano reference lock server.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(
        dest="command", metavar="{keys,migrate,serve}", parser_class=_Parser
    )
    db_help = "database URL: sqlite:///PATH or postgresql://... (default: $VOLCANO_DATABASE_URL or sqlite:///volcano.db)"

    keys = commands.add_parser("keys", help="manage project keys")
    keys_commands = keys.add_subparsers(
        dest="keys_command", metavar="{create,rotate,list,revoke,audit}", parser_class=_Parser
    )
    create = keys_commands.add_parser(
        "create", help="make an anon key and a service key for a project"
    )
    create.add_argument(
        "--project", required=True, type=_project_name, help="project name (created if new)"
    )
    create.add_argument(
        "--api-url",
        type=_api_url,
        default=_DEFAULT_API_URL,
        metavar="URL",
        help="the URL clients reach this server at, written as VOLCANO_API_URL with the keys "
        f"(default: {_DEFAULT_API_URL}, what serve listens on by default)",
    )
    create.add_argument(
        "--output",
        metavar="FILE",
        help="write the three lines to FILE, readable only by you, instead of stdout "
        "(replaces FILE whole; keep it out of version control)",
    )
    rotate = keys_commands.add_parser(
        "rotate", help="add a service key to a project; its old keys work until revoked"
    )
    rotate.add_argument("--project", required=True, type=_project_name, help="project name")
    listing = keys_commands.add_parser(
        "list", help="list keys: id, kind, project, created, last used, revoked (never a secret)"
    )
    listing.add_argument("--project", type=_project_name, help="only this project's keys")
    revoke = keys_commands.add_parser(
        "revoke", help="revoke a key by id; every server refuses it within seconds"
    )
    revoke.add_argument("key_id", metavar="ID", help="the key's id, as keys list shows it")
    audit = keys_commands.add_parser("audit", help="show the audit trail of key changes")
    audit.add_argument("--project", type=_project_name, help="only this project's changes")
    for command in (create, rotate, listing, revoke, audit):
        command.add_argument("--db", default=None, help=db_help)

    migrate = commands.add_parser(
        "migrate", help="create or upgrade the database schema, then exit"
    )
    migrate.add_argument("--db", default=None, help=db_help)

    serve = commands.add_parser("serve", help="serve the lock API")
    serve.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (default: 127.0.0.1)"
    )
    serve.add_argument(
        "--port", type=_port, default=8787, help="port, 0 for any free one (default: 8787)"
    )
    serve.add_argument("--db", default=None, help=db_help)
    serve.add_argument(
        "--retention",
        type=_positive_float,
        default=600.0,
        metavar="SECONDS",
        help="how long request ids are remembered for replay, at least 600 (default: 600)",
    )
    serve.add_argument(
        "--rate-limit",
        type=_positive_float,
        default=None,
        metavar="PER_SECOND",
        help="requests per second per project and process (default: unlimited)",
    )
    serve.add_argument(
        "--max-waiters-per-project",
        type=_positive_int,
        default=1_000,
        metavar="N",
        help="waiting requests (waiting acquires and watches) one project may hold open in"
        " this process; more get 429 (default: %(default)s)",
    )
    serve.add_argument(
        "--max-requests-per-project",
        type=_positive_int,
        default=256,
        metavar="N",
        help="other requests one project may have in flight in this process; more get 429"
        " (default: %(default)s)",
    )
    serve.add_argument(
        "--key-retention",
        type=_positive_float,
        default=3_600.0,
        metavar="SECONDS",
        help="keys with no lease and nobody in line, unchanged this long, are deleted; used again"
        " they go on from their project's floor (default: 3600)",
    )
    serve.add_argument(
        "--max-keys-per-project",
        type=_whole_number,
        default=0,
        metavar="N",
        help="keys one project may have stored; an acquire of a new key past it gets 409"
        " quota_exceeded (default: 0, no quota)",
    )
    serve.add_argument(
        "--max-holders-per-key",
        type=_positive_int,
        default=1_000,
        metavar="N",
        help="the largest limit (semaphore slots) an acquire may ask for, at most 1000; more:"
        " 409 quota_exceeded (default: %(default)s)",
    )
    serve.add_argument(
        "--max-label-bytes",
        type=_whole_number,
        default=200,
        metavar="BYTES",
        help="the longest label, at most 200; longer: 409 quota_exceeded (default: %(default)s)",
    )
    serve.add_argument(
        "--patience",
        type=_positive_float,
        default=2.0,
        metavar="SECONDS",
        help="how long a request may wait for the storage behind its own project's earlier"
        " work (the project is over its share of the server's time); then 429 (default: 2)",
    )
    serve.add_argument(
        "--max-body-bytes-per-project",
        type=_positive_int,
        default=2 * 1024 * 1024,
        metavar="BYTES",
        help="bytes of request bodies one project may have in flight in this process (each"
        " counted at its Content-Length); more get 429 before being read (default: %(default)s)",
    )
    serve.add_argument(
        "--max-wait",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="the longest one acquire waits for a held lock, at most the API's 60; set it below "
        "your load balancer's idle timeout (default: 60)",
    )
    serve.add_argument(
        "--sqlite-synchronous",
        choices=("full", "normal"),
        default="full",
        help="SQLite durability: full survives power loss, normal a killed process (default: full)",
    )
    _add_listener_options(serve)
    _add_limit_options(serve)
    serve.add_argument(
        "--no-access-log", dest="access_log", action="store_false", help="do not log each request"
    )
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines, or one JSON object per line (default: text)",
    )
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    _add_background_options(serve)
    return parser


def _add_background_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--daemon",
        action="store_true",
        help="serve in the background: return once listening (status 0, the URL alone on "
        "stdout) or failed (1); needs --log-file",
    )
    serve.add_argument(
        "--log-file", metavar="FILE", help="with --daemon: append the server's output to FILE"
    )
    serve.add_argument(
        "--pid-file",
        metavar="FILE",
        type=Path,
        help="write the server's pid to FILE once listening; removed when it stops cleanly",
    )


def _add_listener_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--ssl-certfile",
        metavar="PATH",
        help="serve HTTPS with this certificate (PEM, chain included)",
    )
    serve.add_argument("--ssl-keyfile", metavar="PATH", help="the certificate's private key (PEM)")
    serve.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at /metrics on this port (default: off)",
    )
    serve.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="interface for the metrics listener; keep it private (default: 127.0.0.1)",
    )
    serve.add_argument(
        "--metrics-key-prefix",
        action="append",
        default=[],
        metavar="PREFIX",
        dest="metric_key_prefixes",
        help="label the lock metrics by this key prefix (repeat for more, at most 32; keys with"
        " none of them are _other); by default they carry no key at all",
    )
    serve.add_argument(
        "--trace-lock-keys",
        action="store_true",
        help="with tracing on (OTEL_TRACES_EXPORTER, or opentelemetry-instrument), name the lock"
        " key in each request's span (default: never)",
    )


def _add_limit_options(serve: argparse.ArgumentParser) -> None:
    defaults = Limits()
    for flag, kind, metavar, what in (
        ("--max-header-bytes", _positive_int, "BYTES", "request line and headers; more: 431"),
        ("--max-header-fields", _positive_int, "N", "header fields of a request; more: 431"),
        ("--header-timeout", _positive_float, "SECONDS", "to send a request's head; then 408"),
        ("--body-timeout", _positive_float, "SECONDS", "to send a request's body; then 408"),
        ("--write-timeout", _positive_float, "SECONDS", "to read answers sent; then closed"),
        ("--keepalive-timeout", _positive_int, "SECONDS", "idle between requests; then closed"),
        ("--max-connections", _positive_int, "N", "open connections; more get 503"),
        (
            "--max-connections-per-address",
            _whole_number,
            "N",
            "connections from one address, 0: no cap (keep 0 behind a proxy); more: 503",
        ),
        ("--backlog", _positive_int, "N", "connections queued to be accepted"),
    ):
        serve.add_argument(
            flag,
            type=kind,
            default=getattr(defaults, flag[2:].replace("-", "_")),
            metavar=metavar,
            help=f"at most this, {what} (default: %(default)s)",
        )


def _project_name(value: str) -> str:
    if not value or len(value) > 100 or not value.isprintable() or value != value.strip():
        raise argparse.ArgumentTypeError(
            f"project names are 1 to 100 printable characters, got {value!r}"
        )
    return value


def _api_url(value: str) -> str:
    if not value:
        # `--api-url "$url"` after a `url=$(volcano-server serve --daemon ...)` that failed.
        raise argparse.ArgumentTypeError(
            "the URL is empty (did the command that should have given it fail?)"
        )
    url = urllib.parse.urlsplit(value)
    if (
        url.scheme not in ("http", "https")
        or not url.hostname
        or "@" in url.netloc
        or url.query
        or url.fragment
        or not set(value) <= _URL_CHARACTERS
    ):
        raise argparse.ArgumentTypeError(
            f"expected an http:// or https:// URL with a host, no credentials and no query, "
            f"got {value!r}"
        )
    return value.rstrip("/")


def _port(value: str) -> int:
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value!r}")
    return int(value)


def _whole_number(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number (0 or more), got {value!r}")
    return int(value)


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return int(value)


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}")
    return number


def _version() -> str:
    try:
        return metadata.version("volcano")
    except metadata.PackageNotFoundError:
        return "unknown"


def _database_url(args: argparse.Namespace) -> str:
    url: str = args.db or os.environ.get("VOLCANO_DATABASE_URL") or DEFAULT_DATABASE_URL
    return url


def _open(url: str, synchronous: Synchronous = "full") -> Storage:
    try:
        return open_storage(url, sqlite_synchronous=synchronous)
    except UnsupportedDatabaseURL as exc:
        raise Fatal(str(exc)) from None
    except StorageUnavailable as exc:
        raise Fatal(f"cannot open the database {redact_url(url)}: {exc}") from None
    except UnsafeDatabase as exc:
        raise Fatal(f"refusing the database {redact_url(url)}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any driver error at start-up is one line, not a traceback
        raise Fatal(
            f"cannot open the database {redact_url(url)}: {type(exc).__name__}: {exc}"
        ) from None


def _migrate(args: argparse.Namespace) -> int:
    url = _database_url(args)
    _open(url).close()
    log.info("schema is up to date in %s", redact_url(url))
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        from ..app._server import Listeners, StartupError, check_address, serve
    except ImportError as exc:
        raise Fatal(
            f"serving needs the server extra ({exc.name} is missing): "
            'pip install "volcano[server]" (from a checkout: pip install ".[server]")'
        ) from None

    url = _database_url(args)
    try:
        config = ServerConfig(
            database_url=url,
            retention_seconds=args.retention,
            rate_limit=args.rate_limit,
            max_waiters_per_project=args.max_waiters_per_project,
            max_requests_per_project=args.max_requests_per_project,
            max_body_bytes_per_project=args.max_body_bytes_per_project,
            patience=args.patience,
            key_retention_seconds=args.key_retention,
            quotas=Quotas(
                keys_per_project=args.max_keys_per_project,
                holders_per_key=args.max_holders_per_key,
                label_bytes=args.max_label_bytes,
            ),
            sqlite_synchronous=args.sqlite_synchronous,
            access_log=args.access_log,
            waiting=WaitingSettings(max_wait_seconds=args.max_wait),
            metric_key_prefixes=tuple(args.metric_key_prefixes),
            trace_lock_keys=args.trace_lock_keys,
            limits=Limits(
                max_header_bytes=args.max_header_bytes,
                max_header_fields=args.max_header_fields,
                header_timeout=args.header_timeout,
                body_timeout=args.body_timeout,
                write_timeout=args.write_timeout,
                keepalive_timeout=args.keepalive_timeout,
                max_connections=args.max_connections,
                max_connections_per_address=args.max_connections_per_address,
                backlog=args.backlog,
            ),
        )
    except ValueError as exc:
        raise Fatal(str(exc)) from None
    listeners = Listeners(
        host=args.host,
        port=args.port,
        ssl_certfile=_readable(args.ssl_certfile),
        ssl_keyfile=_readable(args.ssl_keyfile),
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
    )
    if listeners.ssl_keyfile and not listeners.ssl_certfile:
        raise Fatal("--ssl-keyfile needs --ssl-certfile")
    try:
        check_address(listeners)  # before --daemon forks: a taken port is this command's error
    except StartupError as exc:
        raise Fatal(str(exc)) from None

    def start(announce: Announce) -> int:
        from ..telemetry._tracing import TracingSetupError, configure_from_environment

        try:  # in the process that serves (after --daemon's fork): the exporter's thread
            stop_tracing = configure_from_environment()
        except TracingSetupError as exc:
            raise Fatal(str(exc)) from None
        storage = _open(url, config.sqlite_synchronous)
        try:
            return serve(config, storage, listeners, announce, on_stop=stop_tracing)
        except StartupError as exc:
            raise Fatal(str(exc)) from None

    return _in_place(args, start)


def _in_place(args: argparse.Namespace, start: Callable[[Announce], int]) -> int:
    """Run `start` here or, with --daemon, in the background with its log in --log-file."""
    from ._daemon import Announce, open_log, run_in_background

    if args.daemon and args.log_file is None:
        raise Fatal("--daemon needs --log-file FILE: in the background there is no terminal")
    if args.log_file is not None and not args.daemon:
        raise Fatal("--log-file goes with --daemon; in the foreground, redirect stderr (2>>FILE)")
    if args.pid_file is not None and not os.access(args.pid_file.parent, os.W_OK):
        raise Fatal(f"cannot write the pid file {args.pid_file}: its directory is not writable")
    announce = Announce(pid_file=args.pid_file)
    if not args.daemon:
        return start(announce)
    try:
        log = open_log(args.log_file)
    except OSError as exc:
        raise Fatal(f"cannot open the log file {args.log_file}: {exc.strerror}") from None
    return run_in_background(start, log, announce)


def _readable(path: str | None) -> str | None:
    if path is not None and not os.access(path, os.R_OK):
        raise Fatal(f"cannot read {path}")
    return path
