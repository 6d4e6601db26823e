"""A transaction's shape on PostgreSQL: pipelined statements, a function, simple queries.

    python -m bench._pg_shapes [--rounds 5] [--transactions 1000]

One acquire of a free key with a request id, as the server's first round trip would send it,
then its writes with COMMIT, in one thread of this process with psycopg:

- batch: BEGIN, the settings, the claim, the key's lock and the head of its line (five
  statements, one Sync), as the adapter sent them before `volcano_open`;
- function: BEGIN, the settings, and one call of `volcano_open`, the PL/pgSQL function that
  runs the same claim, lock and line read (its statements' plans cached in the session);
- functions: that, and the writes as one call of a second function;
- simple: the function shape without pipeline mode, each round trip one simple-protocol
  query of several statements, bound on the client: what the adapter sends now.

Each round runs every shape, in a shuffled order, on a fresh database; prints the medians of
wall time, of this process's CPU time (psycopg's share of a server's) and of the database
backend's CPU time per transaction.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from volcano_server.storage import _postgres as pg

from ._servers import fresh_database

# The writes of a granted acquire as one call of a PL/pgSQL function (plans cached too).
SAVE_FUNCTION = """
CREATE FUNCTION bench_save(p_project bigint, p_key text, p_token bigint, p_owner text,
    p_expires bigint, p_ttl double precision, p_request text, p_print bytea, p_status int,
    p_body bytea, p_retry int, p_kept bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO locks (project_id, key, fencing_token, owner_token, expires_at_us, ttl_seconds)
        VALUES (p_project, p_key, p_token, p_owner, p_expires, p_ttl)
        ON CONFLICT (project_id, key) DO UPDATE SET fencing_token = excluded.fencing_token,
        owner_token = excluded.owner_token, expires_at_us = excluded.expires_at_us,
        ttl_seconds = excluded.ttl_seconds;
    DELETE FROM lock_waiters WHERE project_id = p_project AND key = p_key
        AND owner_token = p_owner;
    INSERT INTO request_outcomes
        (project_id, request_id, fingerprint, status, body, retry_after, expires_at_us)
        VALUES (p_project, p_request, p_print, p_status, p_body, p_retry, p_kept)
        ON CONFLICT (project_id, request_id) DO UPDATE SET fingerprint = excluded.fingerprint,
        status = excluded.status, body = excluded.body, retry_after = excluded.retry_after,
        expires_at_us = excluded.expires_at_us;
END $$
"""


# The key's lock (or placeholder) as one statement, as the batch shape sent it.
LOCK = (
    "WITH found AS (SELECT fencing_token, owner_token, expires_at_us, ttl_seconds FROM locks"
    " WHERE project_id = %(project_id)s AND key = %(key)s FOR UPDATE),"
    " placed AS (INSERT INTO locks AS l (project_id, key, fencing_token)"
    " SELECT %(project_id)s, %(key)s, 0 WHERE NOT EXISTS (SELECT FROM found)"
    " ON CONFLICT (project_id, key) DO UPDATE SET fencing_token = l.fencing_token"
    " RETURNING fencing_token, owner_token, expires_at_us, ttl_seconds)"
    " SELECT * FROM found UNION ALL SELECT * FROM placed"
)


def batch(conn: psycopg.Connection[Any], limits: tuple[str, tuple[str, ...]], key: str) -> None:
    with conn.pipeline() as pipeline:
        conn.execute(pg._BEGIN)
        conn.execute(*limits)
        claim = conn.execute(pg._CLAIM, (1, str(uuid.uuid4())))
        lock = conn.execute(LOCK, {"project_id": 1, "key": key})
        line = conn.execute(pg._QUEUED, (1, key, pg._LINE_AHEAD))
        pipeline.sync()
        claim.fetchone(), lock.fetchone(), line.fetchall()
        writes(conn, key)


def function(conn: psycopg.Connection[Any], limits: tuple[str, tuple[str, ...]], key: str) -> None:
    with conn.pipeline() as pipeline:
        conn.execute(pg._BEGIN)
        conn.execute(*limits)
        opened = conn.execute(pg._OPEN, (1, key, str(uuid.uuid4()), pg._LINE_AHEAD))
        pipeline.sync()
        opened.fetchone()
        writes(conn, key)


def functions(conn: psycopg.Connection[Any], limits: tuple[str, tuple[str, ...]], key: str) -> None:
    with conn.pipeline() as pipeline:
        conn.execute(pg._BEGIN)
        conn.execute(*limits)
        opened = conn.execute(pg._OPEN, (1, key, str(uuid.uuid4()), pg._LINE_AHEAD))
        pipeline.sync()
        opened.fetchone()
        conn.execute(
            "SELECT bench_save(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (1, key, 1, "owner", 2**60, 30.0, str(uuid.uuid4()), b"x", 200, b"{}", None, 2**60),
        )
        conn.execute("COMMIT")


def writes(conn: psycopg.Connection[Any], key: str) -> None:
    """The writes of a granted acquire, queued to go with COMMIT."""
    conn.execute(pg._SAVE_LOCK, (1, key, 1, "owner", 2**60, 30.0))
    conn.execute(
        "DELETE FROM lock_waiters WHERE project_id = %s AND key = %s AND owner_token = %s",
        (1, key, "owner"),
    )
    conn.execute(pg._SAVE_OUTCOME, (1, str(uuid.uuid4()), b"x", 200, b"{}", None, 2**60))
    conn.execute("COMMIT")


def simple(conn: psycopg.Connection[Any], limits: tuple[str, tuple[str, ...]], key: str) -> None:
    """The function shape without pipeline mode: each round trip one simple-protocol query."""
    cursor = psycopg.ClientCursor(conn)
    first = "; ".join(
        [
            pg._BEGIN,
            cursor.mogrify(*limits),
            cursor.mogrify(pg._OPEN, (1, key, str(uuid.uuid4()), pg._LINE_AHEAD)),
        ]
    )
    cursor.execute(first.encode(), prepare=False)
    while cursor.nextset():
        pass
    cursor.fetchone()
    second = "; ".join(
        [
            cursor.mogrify(pg._SAVE_LOCK, (1, key, 1, "owner", 2**60, 30.0)),
            cursor.mogrify(
                "DELETE FROM lock_waiters WHERE project_id = %s AND key = %s AND owner_token = %s",
                (1, key, "owner"),
            ),
            cursor.mogrify(pg._SAVE_OUTCOME, (1, str(uuid.uuid4()), b"x", 200, b"{}", None, 2**60)),
            "COMMIT",
        ]
    )
    cursor.execute(second.encode(), prepare=False)


SHAPES: dict[str, Callable[[psycopg.Connection[Any], tuple[str, tuple[str, ...]], str], None]] = {
    "batch": batch,
    "function": function,
    "functions": functions,
    "simple": simple,
}


def backend_cpu(pid: int) -> float:
    """CPU seconds used so far by the PostgreSQL backend process `pid` (on this machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._pg_shapes", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--transactions", type=int, default=1000)
    args = parser.parse_args()
    limits = pg._limits_statement({"lock_timeout": "3s", "statement_timeout": "5s"}, skip=set())
    wall: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    cpu: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    db: dict[str, list[float]] = {shape: [] for shape in SHAPES}
    for _ in range(args.rounds):
        with fresh_database("postgres") as url:
            pg.PostgresStorage(url).close()  # the schema, with volcano_open
            with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
                conn.execute(SAVE_FUNCTION)
                row = conn.execute("SELECT pg_backend_pid()").fetchone()
                assert row is not None
                backend = int(row[0])
                order = list(SHAPES)
                random.shuffle(order)
                for shape in order:
                    key = f"{shape}-{uuid.uuid4().hex[:6]}"
                    SHAPES[shape](conn, limits, key)  # warm up
                    started, cpu_started = time.perf_counter(), time.process_time()
                    db_started = backend_cpu(backend)
                    for _ in range(args.transactions):
                        SHAPES[shape](conn, limits, key)
                    wall[shape].append((time.perf_counter() - started) / args.transactions)
                    cpu[shape].append((time.process_time() - cpu_started) / args.transactions)
                    db[shape].append((backend_cpu(backend) - db_started) / args.transactions)
    for shape in SHAPES:
        print(
            f"{shape:9} wall {statistics.median(wall[shape]) * 1e6:6.0f} us"
            f" [{min(wall[shape]) * 1e6:.0f}, {max(wall[shape]) * 1e6:.0f}],"
            f" client CPU {statistics.median(cpu[shape]) * 1e6:6.0f} us"
            f" [{min(cpu[shape]) * 1e6:.0f}, {max(cpu[shape]) * 1e6:.0f}],"
            f" database CPU {statistics.median(db[shape]) * 1e6:6.0f} us"
            f" [{min(db[shape]) * 1e6:.0f}, {max(db[shape]) * 1e6:.0f}] per transaction"
        )


if __name__ == "__main__":
    main()
