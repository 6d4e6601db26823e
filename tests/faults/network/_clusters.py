"""A primary on pg1 with a standby on pg2, and servers a and b on them: the failover tests' own.

The tested configuration of docs/production.md ("High availability"): both clusters keep fsync
on, the primary waits for pg2 (`SYNCHRONOUS`) or not (`ASYNCHRONOUS`), and the servers name
both hosts, the primary first, in one URL.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.support.netlab import Lab
from tests.support.private_postgres import PrivatePostgres, new_database_name
from tests.support.raw import wait_for

from .conftest import Deployment, deployed

SYNCHRONOUS = {"synchronous_standby_names": "'FIRST 1 (pg2)'", "synchronous_commit": "on"}
"""The primary's replication settings: every commit waits until pg2 has flushed it."""
ASYNCHRONOUS = {"synchronous_standby_names": "''"}


@contextlib.contextmanager
def clusters(
    lab: Lab, *, standby: bool, synchronous: bool = True
) -> Iterator[tuple[PrivatePostgres, PrivatePostgres | None]]:
    """A durable primary on pg1 and, with `standby`, a standby of it on pg2, streaming."""
    settings = (SYNCHRONOUS if synchronous else ASYNCHRONOUS) if standby else {}
    with PrivatePostgres(lab, "pg1", durable=True, settings=settings) as primary:
        if not standby:
            yield primary, None
            return
        with primary.standby("pg2") as copy:
            state = "sync" if synchronous else "async"
            wait_for(
                lambda: primary.sql("SELECT sync_state FROM pg_stat_replication") == state,
                f"pg2 to stream from pg1 ({state})",
            )
            yield primary, copy


@contextlib.contextmanager
def deployed_on(
    lab: Lab, primary: PrivatePostgres, standby: PrivatePostgres | None
) -> Iterator[Deployment]:
    """Servers a and b on a new database, through the URL naming both hosts (the primary
    first; only a session that takes writes will do)."""
    name = new_database_name()
    primary.sql(f"CREATE DATABASE {name}")
    hosts = ",".join(f"{c.address}:{c.port}" for c in (primary, standby) if c is not None)
    with deployed(
        lab, f"postgresql://postgres@{hosts}/{name}?target_session_attrs=read-write"
    ) as d:
        yield d
