"""The `volcano-server` command: make project keys, migrate, serve.

    volcano-server keys create --project NAME [--db URL]
    volcano-server migrate [--db URL]
    volcano-server serve [--host 127.0.0.1] [--port 8787] [--db URL] [...]

`--db` defaults to $VOLCANO_DATABASE_URL, else sqlite:///volcano.db in the working directory.
Every failure is one line on stderr and a non-zero exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import NoReturn

from .storage import (
    DEFAULT_DATABASE_URL,
    Storage,
    StorageUnavailable,
    UnsupportedDatabaseURL,
    open_storage,
    redact_url,
)

__all__ = ["main"]

log = logging.getLogger("volcano_server")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None or (args.command == "keys" and args.keys_command is None):
        print(
            "volcano-server: error: choose a command: keys create, migrate or serve (see --help)",
            file=sys.stderr,
        )
        return 2
    _configure_logging(getattr(args, "log_level", "info"))
    try:
        handler = {"keys": _keys_create, "migrate": _migrate, "serve": _serve}[args.command]
        return handler(args)
    except KeyboardInterrupt:
        return 130
    except _Fatal as exc:
        print(f"volcano-server: {exc}", file=sys.stderr)
        return 1


class _Fatal(Exception):
    """A failure reported as one line."""


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
        dest="keys_command", metavar="{create}", parser_class=_Parser
    )
    create = keys_commands.add_parser(
        "create", help="make an anon key and a service key for a project"
    )
    create.add_argument(
        "--project", required=True, type=_project_name, help="project name (created if new)"
    )
    create.add_argument("--db", default=None, help=db_help)

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
        "--sqlite-synchronous",
        choices=("full", "normal"),
        default="full",
        help="SQLite durability: full survives power loss, normal a killed process (default: full)",
    )
    serve.add_argument(
        "--no-access-log", dest="access_log", action="store_false", help="do not log each request"
    )
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    return parser


def _project_name(value: str) -> str:
    if not value or len(value) > 100 or not value.isprintable() or value != value.strip():
        raise argparse.ArgumentTypeError(
            f"project names are 1 to 100 printable characters, got {value!r}"
        )
    return value


def _port(value: str) -> int:
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value!r}")
    return int(value)


def _positive_float(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}")
    return number


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("volcano_server")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
    # The PostgreSQL driver's pool reports reconnections; give its lines the same shape.
    driver = logging.getLogger("psycopg")
    driver.handlers[:] = [handler]
    driver.setLevel(max(logging.WARNING, root.level))
    driver.propagate = False


def _version() -> str:
    try:
        return metadata.version("volcano")
    except metadata.PackageNotFoundError:
        return "unknown"


def _database_url(args: argparse.Namespace) -> str:
    url: str = args.db or os.environ.get("VOLCANO_DATABASE_URL") or DEFAULT_DATABASE_URL
    return url


def _open(url: str, synchronous: str = "full") -> Storage:
    try:
        return open_storage(url, sqlite_synchronous=synchronous)
    except UnsupportedDatabaseURL as exc:
        raise _Fatal(str(exc)) from None
    except StorageUnavailable as exc:
        raise _Fatal(f"cannot open the database {redact_url(url)}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any driver error at start-up is one line, not a traceback
        raise _Fatal(
            f"cannot open the database {redact_url(url)}: {type(exc).__name__}: {exc}"
        ) from None


def _keys_create(args: argparse.Namespace) -> int:
    from ._auth import make_project_keys

    storage = _open(_database_url(args))
    try:
        keys = make_project_keys(storage, args.project)
    except StorageUnavailable as exc:
        raise _Fatal(f"cannot store the keys: {exc}") from None
    finally:
        storage.close()
    print(f"VOLCANO_ANON_KEY={keys.anon_key}")
    print(f"VOLCANO_SERVICE_KEY={keys.service_key}")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    url = _database_url(args)
    _open(url).close()
    log.info("schema is up to date in %s", redact_url(url))
    return 0


def _serve(args: argparse.Namespace) -> int:
    from ._config import ServerConfig

    try:
        from ._server import serve
    except ImportError as exc:
        raise _Fatal(
            f'serving needs the server extra ({exc.name} is missing): pip install "volcano[server]"'
        ) from None

    url = _database_url(args)
    try:
        config = ServerConfig(
            database_url=url,
            retention_seconds=args.retention,
            rate_limit=args.rate_limit,
            sqlite_synchronous=args.sqlite_synchronous,
            access_log=args.access_log,
        )
    except ValueError as exc:
        raise _Fatal(str(exc)) from None
    storage = _open(url, args.sqlite_synchronous)
    return serve(config, storage, host=args.host, port=args.port)
