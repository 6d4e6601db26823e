"""PostgreSQL storage: any number of server processes on one database.

- Time is the database's clock (`clock_timestamp()`), so server machines with skewed clocks
  cannot disagree about who holds a lock. A write transaction reads it once, in `volcano_open`,
  after the key's row lock is granted: every liveness decision and every new expiry is made
  with a clock read while nobody else can change the key, and after the request arrived, so a
  new expiry of now + ttl is never earlier than the client's own deadline. (Read before the
  lock, a "now" is stale by the lock wait: a waiter that joined meanwhile could be handed a
  lease dated before its own request was sent, which the schedule explorer found.)
- A write transaction locks the key's row with `SELECT ... FOR UPDATE`, which in READ
  COMMITTED waits for a concurrent writer and returns the row as it committed; a key never seen
  before gets a placeholder row to lock instead (`_LockedKey`, the one place that knows them),
  which none but its own transaction ever sees.
- Request ids are claimed the same way: the placeholder outcome row (expired by construction)
  is inserted, or the stored one is locked and returned. A concurrent duplicate waits on that
  row until the first transaction commits, then reads its outcome.
- Each operation is one short transaction in two round trips, each one simple-protocol query
  of several statements: BEGIN, its per-transaction settings and one call of `volcano_open` (a
  function that claims the request id or reads the clock, locks the key's row and reads the
  head of its line, and decides nothing) go out together; the rules decide in Python on what
  came back; the writes go out with COMMIT. Nothing is kept in the session (no prepared
  statements, no session SET, no session advisory locks; the function's cached plans live in
  the database process, unseen by the protocol), so a transaction-mode pooler such as
  PgBouncer can sit in between.
- The queue of waiters is a table shared by every server; a server that reserves the lock for
  a waiter held by another server tells it with `NOTIFY` (sent when the transaction commits),
  and each server `LISTEN`s on one connection of its own, outside the pool. That connection
  needs a real session: behind a transaction-mode pooler, point the servers' `LISTEN` at the
  database directly or rely on their timers (see the README).
- Anything that says "the database cannot serve right now" (connection refused or lost, pool
  timeout, admin shutdown, the database starting up, lock or statement timeouts, serialization
  failures, a read-only standby) is `StorageUnavailable`: the API answers 503. A connection
  lost during COMMIT leaves the outcome unknown; the request's outcome row commits or not with
  it, so a retry with the same request id either replays it or runs it once.
- A primary with standbys (`_replication`): with several hosts in the URL only the one that
  takes writes is connected to, a commit the synchronous standby may not have is never
  acknowledged, and a database whose commits a crash can lose is refused at start.
- Packets that just vanish are bounded on both sides: this side gives a silent connection up
  after about 5 s (`NETWORK_DEFAULTS`), and each transaction makes the database give up on a
  silent server after 2 s (`_SILENCE_SETTINGS`, idle in transaction), below the lock timeout,
  so a server that vanished mid-transaction never holds a key's row lock past others' waits.
"""

from __future__ import annotations

import asyncio
import logging
import select
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ._base import (
    ExpiredLease,
    KeyRecord,
    Lease,
    Listener,
    LockRow,
    LockSummary,
    OnLocked,
    StaleClock,
    StoredOutcome,
    Waiter,
    WaiterState,
    WouldBlock,
)
from ._keys import KeyAdmin, Sql
from ._postgres_groups import PostgresGroupReads, PostgresGroups
from ._replication import Commits, check_durability, host_count, writer_only
from ._sql import (
    HOLDERS_PAGE,
    IDLE_KEYS,
    LEASE_COLUMNS,
    LEASE_COUNTS,
    LEASES,
    TOUCH_SERVER,
    WAITING_COUNT,
    bump_groups,
    bump_versions,
    ended_of,
    for_postgres,
    leases_of,
    listed_keys,
    listed_params,
    lock_writes,
    raise_floors,
    unavailable_when,
)
from ._urls import UnsupportedDatabaseURL, redact_url

__all__ = ["CHANGE_CHANNEL", "HANDOFF_CHANNEL", "PostgresStorage", "heard"]

log = logging.getLogger("volcano_server")

# The reads of a transaction's first round trip, as one call: claim the request id (when one is
# given), lock the key's row or place its placeholder (see `_LockedKey`), then read the clock and
# the head of its line. The clock is read only once the row lock is granted (and the request id
# claimed, which may wait for a concurrent duplicate): a "now" read before a lock wait is stale
# by however long the wait took, and every liveness decision and new expiry is made with it (the
# schedule explorer found leases dated early by a stale now, issue 19). A VOLATILE function runs
# each statement on a new snapshot in READ COMMITTED, so the line is read after the lock is
# granted too; and its plans are cached in the database session, which no pooler sees. It
# decides nothing: the rules run in Python, on what it returns.
#
# It also says which servers watch the key (issue 22), read once the row lock is granted: a
# watch recorded before is seen, and one recorded after waits for this transaction's commit.
_OPEN_FUNCTION = """
CREATE OR REPLACE FUNCTION volcano_open(
    p_project bigint, p_key text, p_request text, p_line integer
) RETURNS TABLE (
    claimed_print bytea, claimed_status integer, claimed_body bytea, claimed_retry integer,
    claimed_until bigint, claimed_undelivered boolean, clock_us bigint, lock_token bigint,
    lock_limit integer, lock_version bigint, leases jsonb, line jsonb, watchers jsonb,
    key_floor bigint
) LANGUAGE plpgsql AS $$
BEGIN
    IF p_request IS NOT NULL THEN
        INSERT INTO request_outcomes AS o
            (project_id, request_id, fingerprint, status, body, retry_after, expires_at_us)
            VALUES (p_project, p_request, '', 0, '', NULL, 0)
            ON CONFLICT (project_id, request_id) DO UPDATE SET expires_at_us = o.expires_at_us
            RETURNING o.fingerprint, o.status, o.body, o.retry_after, o.expires_at_us,
                o.undelivered
            INTO claimed_print, claimed_status, claimed_body, claimed_retry, claimed_until,
                claimed_undelivered;
    END IF;
    SELECT l.fencing_token, l.limit_count, l.version INTO lock_token, lock_limit, lock_version
        FROM locks l WHERE l.project_id = p_project AND l.key = p_key FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO locks AS l (project_id, key, fencing_token) VALUES (p_project, p_key, 0)
            ON CONFLICT (project_id, key) DO UPDATE SET fencing_token = l.fencing_token
            RETURNING l.fencing_token, l.limit_count, l.version
            INTO lock_token, lock_limit, lock_version;
    END IF;
    clock_us := volcano_clock_us();
    SELECT coalesce(jsonb_agg(jsonb_build_array(x.fencing_token, x.owner_token,
            x.expires_at_us, x.ttl_seconds, x.label, x.granted_at_us, x.shared)
            ORDER BY x.fencing_token), '[]')
        INTO leases
        FROM leases x WHERE x.project_id = p_project AND x.key = p_key;
    SELECT coalesce(jsonb_agg(jsonb_build_array(w.seq, w.project_id, w.key, w.owner_token,
            w.ttl_seconds, w.server_id, w.state, w.until_us, w.label, s.alive_until_us,
            w.shared) ORDER BY w.seq), '[]')
        INTO line
        FROM (SELECT * FROM lock_waiters w
              WHERE w.project_id = p_project AND w.key = p_key AND w.state != 'away'
              ORDER BY w.seq LIMIT p_line) w
        LEFT JOIN servers s USING (server_id);
    SELECT coalesce(jsonb_agg(x.server_id), '[]') INTO watchers
        FROM lock_watches x WHERE x.project_id = p_project AND x.key = p_key;
    -- Read after the row lock: a purge of the key (which raised the floor) has committed.
    SELECT p.key_floor INTO key_floor FROM projects p WHERE p.id = p_project;
    RETURN NEXT;
END $$
"""

# The database clock in integer microseconds since the Unix epoch: every statement that reads
# time calls this one function (a test database may put a clock of its own in its place).
_CLOCK_FUNCTION = """
CREATE OR REPLACE FUNCTION volcano_clock_us() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$
"""

# Fails its transaction with SQLSTATE VO001 (a class no PostgreSQL error uses) once the database
# clock has reached `p_bound`: the check of `WriteTx.commit_before`, just before COMMIT.
_STILL_BEFORE_FUNCTION = """
CREATE OR REPLACE FUNCTION volcano_still_before(p_bound bigint) RETURNS void LANGUAGE plpgsql
VOLATILE AS $$
BEGIN
    IF volcano_clock_us() >= p_bound THEN
        RAISE EXCEPTION USING ERRCODE = 'VO001',
            MESSAGE = 'a lease this transaction kept live expired since its clock read';
    END IF;
END $$
"""

# Schema changes, by the version they bring the database to; each runs once, in order.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE IF NOT EXISTS projects (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            name text NOT NULL UNIQUE,
            created_at_us bigint NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS api_keys (
            key_hash bytea PRIMARY KEY,
            project_id bigint NOT NULL REFERENCES projects (id),
            kind text NOT NULL CHECK (kind IN ('anon', 'service')),
            created_at_us bigint NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS locks (
            project_id bigint NOT NULL,
            key text COLLATE "C" NOT NULL,
            fencing_token bigint NOT NULL,
            owner_token text COLLATE "C",
            expires_at_us bigint,
            ttl_seconds double precision,
            PRIMARY KEY (project_id, key)
        )""",
        """CREATE TABLE IF NOT EXISTS request_outcomes (
            project_id bigint NOT NULL,
            request_id text COLLATE "C" NOT NULL,
            fingerprint bytea NOT NULL,
            status integer NOT NULL,
            body bytea NOT NULL,
            retry_after integer,
            expires_at_us bigint NOT NULL,
            PRIMARY KEY (project_id, request_id)
        )""",
        "CREATE INDEX IF NOT EXISTS request_outcomes_by_expiry ON request_outcomes (expires_at_us)",
    ),
    # Key lifecycle: public ids, revocation, last use, and an audit trail of key changes.
    2: (
        (
            'ALTER TABLE api_keys ADD COLUMN key_id text COLLATE "C",'
            " ADD COLUMN last_used_at_us bigint, ADD COLUMN revoked_at_us bigint"
        ),
        "UPDATE api_keys SET key_id = 'key_' || encode(substring(key_hash from 1 for 8), 'hex')",
        "ALTER TABLE api_keys ALTER COLUMN key_id SET NOT NULL",
        "CREATE UNIQUE INDEX api_keys_by_id ON api_keys (key_id)",
        """CREATE TABLE key_events (
            id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            at_us bigint NOT NULL,
            action text NOT NULL,
            key_id text COLLATE "C" NOT NULL,
            kind text NOT NULL,
            project_id bigint NOT NULL REFERENCES projects (id),
            actor text NOT NULL
        )""",
        (
            "INSERT INTO key_events (at_us, action, key_id, kind, project_id, actor)"
            " SELECT created_at_us, 'created', key_id, kind, project_id, 'before the audit trail'"
            " FROM api_keys ORDER BY created_at_us"
        ),
    ),
    # Waiting for a lock: the queue of each key, and the servers holding its requests.
    3: (
        """CREATE TABLE lock_waiters (
            seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            project_id bigint NOT NULL,
            key text COLLATE "C" NOT NULL,
            owner_token text COLLATE "C" NOT NULL,
            ttl_seconds double precision NOT NULL,
            server_id text COLLATE "C" NOT NULL,
            state text NOT NULL CHECK (state IN ('waiting', 'reserved', 'away')),
            until_us bigint,
            UNIQUE (project_id, key, owner_token)
        )""",
        "CREATE INDEX lock_waiters_in_line ON lock_waiters (project_id, key, seq)",
        """CREATE TABLE servers (
            server_id text COLLATE "C" PRIMARY KEY,
            alive_until_us bigint NOT NULL
        )""",
    ),
    # Issue 14: a transaction's first round trip as one call of a function (made by 5 now).
    4: (),
    # Issue 19: the clock read through one function, and read after the key's row is locked;
    # a lease handed to a waiting request is "undelivered" until its client has it.
    # Issue 21: a key has a limit and any number of leases up to it (semaphores), in a table
    # of their own; a key's live lease moves there.
    5: (
        "ALTER TABLE request_outcomes ADD COLUMN undelivered boolean NOT NULL DEFAULT false",
        "ALTER TABLE locks ADD COLUMN limit_count integer NOT NULL DEFAULT 1",
        """CREATE TABLE leases (
            project_id bigint NOT NULL,
            key text COLLATE "C" NOT NULL,
            fencing_token bigint NOT NULL,
            owner_token text COLLATE "C" NOT NULL,
            expires_at_us bigint NOT NULL,
            ttl_seconds double precision NOT NULL,
            label text,
            PRIMARY KEY (project_id, key, fencing_token)
        )""",
        (
            "INSERT INTO leases"
            " (project_id, key, fencing_token, owner_token, expires_at_us, ttl_seconds)"
            " SELECT project_id, key, fencing_token, owner_token, expires_at_us, ttl_seconds"
            " FROM locks WHERE owner_token IS NOT NULL AND expires_at_us IS NOT NULL"
            " AND ttl_seconds IS NOT NULL"
        ),
        (
            "ALTER TABLE locks DROP COLUMN owner_token, DROP COLUMN expires_at_us,"
            " DROP COLUMN ttl_seconds"
        ),
        _CLOCK_FUNCTION,
        # The function's result columns change: it must be dropped, not replaced. (It is today's
        # function: PL/pgSQL resolves the tables it names only when it runs, and 7 replaces it.)
        "DROP FUNCTION IF EXISTS volcano_open(bigint, text, text, integer)",
        _OPEN_FUNCTION,
    ),
    # Issue 25: when each lease was granted, so that whichever server ends it can tell how long
    # it was held (a metric); `volcano_open` returns it with the leases. NULL only for a slot
    # reserved for a waiter, not yet taken; a lease granted before is dated from its last
    # renewal (the latest it can have been granted).
    6: (
        "ALTER TABLE leases ADD COLUMN granted_at_us bigint",
        ("UPDATE leases SET granted_at_us = expires_at_us - round(ttl_seconds * 1000000)::bigint"),
        # Today's function (see 5), whose result columns may differ from the one in place.
        "DROP FUNCTION IF EXISTS volcano_open(bigint, text, text, integer)",
        _OPEN_FUNCTION,
    ),
    # Issue 22: a key's version (changes of its holders; it starts at the last fencing token,
    # which no reader has seen as a version), a waiter's label for the lease it is given, and
    # which servers watch which keys (they are told of each change by NOTIFY).
    7: (
        "ALTER TABLE locks ADD COLUMN version bigint NOT NULL DEFAULT 0",
        "UPDATE locks SET version = fencing_token",
        "ALTER TABLE lock_waiters ADD COLUMN label text",
        """CREATE TABLE lock_watches (
            project_id bigint NOT NULL,
            key text COLLATE "C" NOT NULL,
            server_id text COLLATE "C" NOT NULL,
            generation bigint NOT NULL,
            PRIMARY KEY (project_id, key, server_id)
        )""",
        "CREATE INDEX lock_watches_by_server ON lock_watches (server_id)",
        "DROP FUNCTION IF EXISTS volcano_open(bigint, text, text, integer)",
        _OPEN_FUNCTION,
    ),
    # Issue 33: storage bounded. Expired leases and keys unused for long are purged; a key's
    # row remembers when it last changed, and a project the highest version any purged key of
    # it had, where a key used again after its row was purged starts (volcano_open says it).
    8: (
        "ALTER TABLE projects ADD COLUMN key_floor bigint NOT NULL DEFAULT 0",
        "ALTER TABLE locks ADD COLUMN updated_at_us bigint NOT NULL DEFAULT 0",
        "DROP FUNCTION IF EXISTS volcano_open(bigint, text, text, integer)",
        _OPEN_FUNCTION,
    ),
    # Issue 37: groups (kept once deleted, so their versions and fencing tokens never go back)
    # and their members, each a lease on its group with public capabilities.
    9: (
        """CREATE TABLE groups (
            project_id bigint NOT NULL,
            name text COLLATE "C" NOT NULL,
            fencing_token bigint NOT NULL,
            version bigint NOT NULL,
            live boolean NOT NULL,
            PRIMARY KEY (project_id, name)
        )""",
        """CREATE TABLE group_members (
            project_id bigint NOT NULL,
            group_name text COLLATE "C" NOT NULL,
            member text COLLATE "C" NOT NULL,
            owner_token text COLLATE "C" NOT NULL,
            fencing_token bigint NOT NULL,
            expires_at_us bigint NOT NULL,
            ttl_seconds double precision NOT NULL,
            capabilities_kind text CHECK (capabilities_kind IN ('json', 'bytes')),
            capabilities bytea,
            capabilities_size integer NOT NULL,
            granted_at_us bigint NOT NULL,
            PRIMARY KEY (project_id, group_name, member)
        )""",
        (
            "CREATE INDEX group_members_by_expiry"
            " ON group_members (project_id, group_name, expires_at_us)"
        ),
    ),
    # Issue 37: shared locks. Each lease is held shared or exclusive (every lease before was
    # exclusive), and a waiter asks for one or the other; `volcano_open` returns both.
    10: (
        "ALTER TABLE leases ADD COLUMN shared boolean NOT NULL DEFAULT false",
        "ALTER TABLE lock_waiters ADD COLUMN shared boolean NOT NULL DEFAULT false",
        _OPEN_FUNCTION,
    ),
    # Issue 34: a transaction that keeps a lease live commits only while the database clock
    # is before that lease's old expiry (`WriteTx.commit_before`).
    11: (_STILL_BEFORE_FUNCTION,),
}
_SCHEMA_VERSION = max(_MIGRATIONS)
# Held (per transaction) while migrating, so servers starting at once migrate in turn.
_MIGRATION_LOCK = 0x766F6C63616E6F  # "volcano"

# The database clock, in integer microseconds since the Unix epoch (`_CLOCK_FUNCTION`).
_NOW_US = "volcano_clock_us()"
_CLOCK = f"SELECT {_NOW_US}"

_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"
# `WriteTx.commit_before`: fail the transaction (and so its COMMIT, sent after it in the same
# message) once the database clock has reached the bound (`_STILL_BEFORE_FUNCTION`; a function,
# whose plan the session caches: an anonymous DO block costs about 0.3 ms more to compile).
_STALE_CLOCK = "VO001"
_STILL_BEFORE = "SELECT volcano_still_before({bound:d})"
# Each transaction makes the database end its side of the connection once the server has been
# silent for `silence_timeout` (vanished behind a black hole, or frozen), so the transaction's
# row locks never outlive a lock wait elsewhere (`lock_timeout`). Between two statements that is
# idle_in_transaction_session_timeout; in the middle of a batch of statements PostgreSQL runs no
# timer at all, so these TCP settings of the database's socket cover it. They are set for the
# transaction only, and only where the database has them (PostgreSQL 12 and later).
_SILENCE_SETTINGS = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_user_timeout")
_CLAIM = (
    "INSERT INTO request_outcomes AS o"
    " (project_id, request_id, fingerprint, status, body, retry_after, expires_at_us)"
    " VALUES (%s, %s, '', 0, '', NULL, 0)"
    " ON CONFLICT (project_id, request_id) DO UPDATE SET expires_at_us = o.expires_at_us"
    " RETURNING fingerprint, status, body, retry_after, expires_at_us, undelivered"
)
_SAVE_OUTCOME = (
    "INSERT INTO request_outcomes (project_id, request_id, fingerprint, status, body,"
    " retry_after, expires_at_us, undelivered) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (project_id, request_id) DO UPDATE SET fingerprint = excluded.fingerprint,"
    " status = excluded.status, body = excluded.body, retry_after = excluded.retry_after,"
    " expires_at_us = excluded.expires_at_us, undelivered = excluded.undelivered"
)
_LEASES = for_postgres(LEASES)
_WAITING_COUNT = for_postgres(WAITING_COUNT)
_TOUCH_SERVER = for_postgres(TOUCH_SERVER)
# SKIP LOCKED: servers purging at once take disjoint batches, and a row a request is
# re-claiming right now is left to it.
_PURGE = (
    "DELETE FROM request_outcomes WHERE (project_id, request_id) IN"  # noqa: S608 - constants
    " (SELECT project_id, request_id FROM request_outcomes"
    f" WHERE expires_at_us <= {_NOW_US} + %s"
    " LIMIT %s FOR UPDATE SKIP LOCKED)"
)

# A waiter's row and its server's heartbeat, which `_waiter` judges against the transaction's now.
_WAITERS = (
    "SELECT w.seq, w.project_id, w.key, w.owner_token, w.ttl_seconds, w.server_id, w.state,"
    " w.until_us, w.label, s.alive_until_us, w.shared"
    " FROM lock_waiters w LEFT JOIN servers s USING (server_id)"
)
_OPEN = "SELECT * FROM volcano_open(%s, %s, %s, %s)"
# Several keys' rows, locked in key order (the lock is taken on each row as the sorted rows are
# returned), so that transactions locking several keys never wait for each other in a circle.
_LOCK_KEYS = (
    "SELECT key, fencing_token, limit_count, version FROM locks"
    " WHERE project_id = %s AND key = ANY(%s) ORDER BY key FOR UPDATE"
)
# Read once the keys are locked (a statement of its own: its own snapshot), as `volcano_open`
# reads the watchers of one key.
_WATCHERS_OF_KEYS = (
    "SELECT key, server_id FROM lock_watches WHERE project_id = %s AND key = ANY(%s)"
)
_LEASES_OF_KEYS = (
    f"SELECT key, {LEASE_COLUMNS} FROM leases"  # noqa: S608 - constants only
    " WHERE project_id = %s AND key = ANY(%s) ORDER BY key, fencing_token"
)
# (project_id, keys, owner tokens): the leases of each (key, owner token) pair, a partial row's.
_LEASES_OF_OWNERS = (
    f"SELECT key, {LEASE_COLUMNS} FROM leases"  # noqa: S608 - constants only
    " JOIN unnest(%s::text[], %s::text[]) AS named (key, owner_token) USING (key, owner_token)"
    " WHERE project_id = %s ORDER BY key, fencing_token"
)
_LEASE_COUNTS = for_postgres(LEASE_COUNTS)
_QUEUED = _WAITERS + (
    " WHERE w.project_id = %s AND w.key = %s AND w.state != 'away' ORDER BY w.seq LIMIT %s"
)
# How much of a key's line `volcano_open` reads along with the key's row.
_LINE_AHEAD = 16
_FIND_WAITER = _WAITERS + " WHERE w.project_id = %s AND w.key = %s AND w.owner_token = %s"
_ADD_WAITER = (
    "INSERT INTO lock_waiters (project_id, key, owner_token, ttl_seconds, server_id, state,"
    " until_us, label, shared) VALUES (%s, %s, %s, %s, %s, 'waiting', NULL, %s, %s)"
    " RETURNING seq"
)
_ADD_WAITER_AT = (
    "INSERT INTO lock_waiters (seq, project_id, key, owner_token, ttl_seconds, server_id, state,"
    " until_us, label, shared) OVERRIDING SYSTEM VALUE"
    " VALUES (%s, %s, %s, %s, %s, %s, 'waiting', NULL, %s, %s)"
)
_PURGE_WAITERS = (
    "DELETE FROM lock_waiters WHERE seq IN (SELECT w.seq FROM lock_waiters w"
    " LEFT JOIN servers s USING (server_id)"
    " WHERE (w.state = 'away' AND w.until_us < %(now)s)"
    " OR coalesce(s.alive_until_us, 0) + %(grace)s < %(now)s"
    " LIMIT %(limit)s FOR UPDATE OF w SKIP LOCKED)"
)
_PURGE_SERVERS = (
    "DELETE FROM servers s WHERE alive_until_us + %(grace)s < %(now)s"
    " AND NOT EXISTS (SELECT 1 FROM lock_waiters w WHERE w.server_id = s.server_id)"
)
# Watches of servers gone for good, or of servers with no heartbeat row at all.
_PURGE_WATCHES = (
    "DELETE FROM lock_watches x WHERE NOT EXISTS (SELECT 1 FROM servers s"
    " WHERE s.server_id = x.server_id AND s.alive_until_us + %(grace)s >= %(now)s)"
)
_WATCH = (
    "INSERT INTO lock_watches (project_id, key, server_id, generation) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (project_id, key, server_id) DO UPDATE SET generation = excluded.generation"
)
_UNWATCH = (
    "DELETE FROM lock_watches WHERE server_id = %s"
    " AND (project_id, key, generation) IN (SELECT * FROM unnest(%s::bigint[], %s::text[],"
    " %s::bigint[]))"
)
# Keys summarized (`LockSummary`) in one statement, so one snapshot: each key's row, its live
# leases counted, its stored expired ones counted, its highest live token, the `holders` live
# leases that end soonest, and its line. Parameters: now, holders, project_id, then the keys.
_SUMMARIES = (
    "SELECT l.key, l.fencing_token, l.limit_count, l.version, c.live, c.expired, c.highest,"
    " (SELECT coalesce(jsonb_agg(jsonb_build_array(x.fencing_token, x.owner_token,"
    " x.expires_at_us, x.ttl_seconds, x.label, x.granted_at_us, x.shared)"
    " ORDER BY x.expires_at_us, x.fencing_token), '[]')"
    " FROM (SELECT * FROM leases y WHERE y.project_id = l.project_id AND y.key = l.key"
    " AND y.expires_at_us > p.now ORDER BY y.expires_at_us, y.fencing_token LIMIT p.holders) x),"
    " (SELECT count(*) FROM lock_waiters w WHERE w.project_id = l.project_id AND w.key = l.key"
    " AND w.state = 'waiting')"
    " FROM (SELECT %s::bigint AS now, %s::int AS holders) p"
    " CROSS JOIN locks l CROSS JOIN LATERAL (SELECT"
    " count(*) FILTER (WHERE z.expires_at_us > p.now) AS live,"
    " count(*) FILTER (WHERE z.expires_at_us <= p.now) AS expired,"
    " max(z.fencing_token) FILTER (WHERE z.expires_at_us > p.now) AS highest"
    " FROM leases z WHERE z.project_id = l.project_id AND z.key = l.key) c"
    " WHERE l.project_id = %s AND l.key IN ({keys}) AND l.fencing_token > 0 ORDER BY l.key"
)
_HOLDERS_PAGE = for_postgres(HOLDERS_PAGE)
# A project's keys (not counting a placeholder, of this transaction or another).
_KEY_COUNT = "SELECT count(*) FROM locks WHERE project_id = %s AND fencing_token > 0"
# A project's floor: the highest version any of its purged keys had.
_KEY_FLOOR = "SELECT coalesce(max(key_floor), 0) FROM projects WHERE id = %s"
# Purging expired leases: their keys' rows locked first, skipping any a transaction holds (it
# will drop what expired itself), then the leases deleted and each version moved past them.
_EXPIRED_KEYS = (
    "SELECT l.project_id, l.key FROM locks l WHERE (l.project_id, l.key) IN"
    " (SELECT DISTINCT x.project_id, x.key FROM leases x WHERE x.expires_at_us <= %(now)s"
    " LIMIT %(limit)s) ORDER BY l.project_id, l.key FOR UPDATE SKIP LOCKED"
)
_DELETE_EXPIRED = (
    "DELETE FROM leases x USING unnest(%(projects)s::bigint[], %(keys)s::text[]) AS k(p, key)"
    " WHERE x.project_id = k.p AND x.key = k.key AND x.expires_at_us <= %(now)s"
    " RETURNING x.project_id, x.key, x.fencing_token, x.expires_at_us, x.granted_at_us"
)
# Purging expired group members: their groups' rows locked first, skipping any a transaction
# holds, then the members deleted and each group's version moved past them.
_EXPIRED_GROUPS = (
    "SELECT g.project_id, g.name FROM groups g WHERE (g.project_id, g.name) IN"
    " (SELECT DISTINCT m.project_id, m.group_name FROM group_members m"
    " WHERE m.expires_at_us <= %(now)s LIMIT %(limit)s)"
    " ORDER BY g.project_id, g.name FOR UPDATE SKIP LOCKED"
)
_DELETE_EXPIRED_MEMBERS = (
    "DELETE FROM group_members m"
    " USING unnest(%(projects)s::bigint[], %(names)s::text[]) AS k(p, name)"
    " WHERE m.project_id = k.p AND m.group_name = k.name AND m.expires_at_us <= %(now)s"
    " RETURNING m.project_id, m.group_name, m.member"
)
# Purging idle keys: their rows locked first, skipping any a transaction holds; then deleted
# only if still without a lease or a waiter, judged by the DELETE's own snapshot, taken once the
# rows are locked (a transaction that added a lease held the row lock, so it has committed).
_IDLE_KEYS = for_postgres(IDLE_KEYS) + " FOR UPDATE SKIP LOCKED"
_DELETE_IDLE = (
    "DELETE FROM locks l USING unnest(%(projects)s::bigint[], %(keys)s::text[]) AS k(p, key)"
    " WHERE l.project_id = k.p AND l.key = k.key"
    " AND NOT EXISTS (SELECT 1 FROM leases x WHERE x.project_id = l.project_id AND x.key = l.key)"
    " AND NOT EXISTS (SELECT 1 FROM lock_waiters w"
    " WHERE w.project_id = l.project_id AND w.key = l.key)"
    " RETURNING l.project_id, l.key, l.version, l.fencing_token"
)
# The channel on which servers tell each other that a waiter's lock was reserved.
HANDOFF_CHANNEL = "volcano_handoff"
# The channel on which servers tell each other that a watched key changed: "project_id key".
CHANGE_CHANNEL = "volcano_change"

# SQLSTATEs outside OperationalError that still mean "not now": a read-only standby (after a
# failover) and a transaction killed for idling too long.
_READ_ONLY = "25006"
_UNAVAILABLE_SQLSTATES = frozenset({_READ_ONLY, "25P03"})

# How long a connection to the database may stay silent before it is given up, when packets
# simply vanish (no RST, no FIN): found by cutting the link in tests/faults/network. Sent data
# unacknowledged for `tcp_user_timeout` ms ends the connection (the kernel's default is about
# 15 minutes of retransmissions). A statement whose bytes were acknowledged but whose answer
# never comes (say, cut while waiting for a row lock) sends nothing, so only keepalives notice:
# the first probe after `keepalives_idle` s of silence, and with `tcp_user_timeout` set the
# connection ends at the first probe past it. Both ways a dead connection is dropped about 5 s
# after the last packet it received; systems without TCP_USER_TIMEOUT get there by
# keepalives_idle + keepalives_interval x keepalives_count = 5 s too. A URL's own values win.
NETWORK_DEFAULTS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 2,
    "keepalives_interval": 1,
    "keepalives_count": 3,
    "tcp_user_timeout": 5_000,
}

# URL query parameters that configure this server's pool rather than libpq.
_POOL_PARAMETERS = frozenset({"pool_size"})


def _offset_none() -> int:
    return 0


class _LockedKey:
    """A key's row as the transaction that locked it found it: the one place placeholders live.

    A key never seen before has no row to lock, so `volcano_open` (`_OPEN_FUNCTION`), which
    locks a key's row, inserts a placeholder row (fencing token 0) when there is none: the
    INSERT either inserts it, holding the new row's lock, or (ON CONFLICT) locks and returns
    the row a concurrent transaction just committed; a row deleted while it waited for it (a
    placeholder of another transaction) is not found, and it places its own. Two first
    acquisitions of a key therefore queue on one row instead of both winning or failing on the
    unique index. A placeholder is never a lease (`row` is None), and one the transaction does
    not replace with a real row is deleted before it commits (`leftover`), so no other
    transaction ever sees one.
    """

    # A reader outside any transaction never meets a placeholder: none is ever committed.
    READ = (
        "SELECT fencing_token, limit_count, version FROM locks WHERE project_id = %s AND key = %s"
    )
    _UNPLACE = "DELETE FROM locks WHERE project_id = %s AND key = %s AND fencing_token = 0"

    def __init__(self, row: LockRow | None, project_id: int, key: str) -> None:
        self._ref = (project_id, key)
        self.row = row
        self._placed = row is None  # by this transaction, and not replaced yet

    def replaced(self) -> None:
        """The transaction saved a real row for the key."""
        self._placed = False

    def leftover(self) -> tuple[str, tuple[object, ...]] | None:
        """The statement that deletes the placeholder before commit, if one is left."""
        return (self._UNPLACE, self._ref) if self._placed else None


def _row(
    project_id: int, key: str, fields: Sequence[Any] | None, leases: Iterable[Sequence[Any]]
) -> LockRow | None:
    """The key a fetched (fencing token, limit, version) holds; token 0 is a placeholder.

    (See `_LockedKey`. A `volcano_open` lease list comes through JSON: a ttl of 30.0 comes back
    as 30.)
    """
    if fields is None or fields[0] == 0:
        return None
    token, limit, version = fields
    return LockRow(project_id, key, token, limit, leases_of(leases), version)


def _waiter(fields: Sequence[Any], now_us: int) -> Waiter:
    """A waiter from a `_WAITERS` row, or an entry of a `volcano_open` line.

    Its server is alive while its heartbeat runs past `now_us`. (A line's numbers come through
    JSON: a ttl of 30.0 comes back as 30.)
    """
    seq, project, key, owner, ttl, server_id, state, until_us, label, alive_until, shared = fields
    alive = alive_until is not None and alive_until > now_us
    return Waiter.from_row(
        (
            seq,
            project,
            key,
            owner,
            float(ttl),
            server_id,
            state,
            until_us,
            label,
            alive,
            shared,
            alive_until,
        )
    )


class _ReadTx(PostgresGroupReads):
    """Reads outside any transaction: the clock, then the row.

    Each statement sees the latest committed state.
    """

    def __init__(self, conn: psycopg.Connection[Any], offset: Callable[[], int]) -> None:
        self._conn = conn
        self._offset = offset
        self._now: int | None = None

    def now_us(self) -> int:
        if self._now is None:
            self._now = _fetch(self._conn, _CLOCK, ())[0] + self._offset()
        return self._now

    def load_lock(self, project_id: int, key: str) -> LockRow | None:
        row = self._conn.execute(_LockedKey.READ, (project_id, key)).fetchone()
        if row is None:
            floor = self._key_floor(project_id)
            return LockRow.purged(project_id, key, floor) if floor else None
        return _row(project_id, key, row, self._conn.execute(_LEASES, (project_id, key)))

    def _key_floor(self, project_id: int) -> int:
        return int(_fetch(self._conn, _KEY_FLOOR, (project_id,))[0])

    def waiting_count(self, project_id: int, key: str) -> int:
        return int(_fetch(self._conn, _WAITING_COUNT, (project_id, key))[0])

    def summarize(self, project_id: int, key: str, *, holders: int) -> LockSummary | None:
        """Two round trips: the clock, then the key summarized (three for a purged key)."""
        found = self._summaries(project_id, [key], holders)
        if found:
            return found[0]
        floor = self._key_floor(project_id)
        return LockSummary.purged(project_id, key, floor) if floor else None

    def list_locks(
        self, project_id: int, *, prefix: str, after: str, limit: int, holders: int
    ) -> list[LockSummary]:
        """Three round trips: the clock, the page's keys, then their summaries together."""
        params = listed_params(project_id, self.now_us(), prefix=prefix, after=after, limit=limit)
        query = for_postgres(listed_keys(bounded=bool(prefix)))
        keys = [key for (key,) in self._conn.execute(query, params)]
        return self._summaries(project_id, keys, holders) if keys else []

    def list_holders(self, project_id: int, key: str, *, after: int, limit: int) -> list[Lease]:
        params = (project_id, key, after, self.now_us(), limit)
        return list(leases_of(self._conn.execute(_HOLDERS_PAGE, params)))

    def _summaries(self, project_id: int, keys: list[str], holders: int) -> list[LockSummary]:
        statement = _SUMMARIES.format(keys=", ".join(["%s"] * len(keys)))
        rows = self._conn.execute(statement, (self.now_us(), holders, project_id, *keys))
        return [
            LockSummary(
                project_id,
                key,
                token,
                limit,
                version + expired,
                leases_of(soonest),
                live,
                highest,
                int(waiting),
            )
            for key, token, limit, version, live, expired, highest, soonest, waiting in rows
        ]


class _WriteTx(PostgresGroups):
    """One READ COMMITTED transaction, in two round trips for one key.

    Statements are bound here (`ClientCursor.mogrify`) and queued; the writes travel with the
    next statement whose result is needed (`_ask`) or with COMMIT, each round trip one
    simple-protocol query of several statements. Every such query ends with ReadyForQuery, so
    while this side decides PostgreSQL counts the session "idle in transaction" and its timeout
    runs: a server that vanished mid-transaction (a black hole, a frozen process) never leaves
    its row locks held with no timeout firing. (In pipeline mode that took a Sync after every
    awaited statement; the simple protocol also spares psycopg's pipeline machinery and the
    database's parse and bind steps, about a third of the CPU on either side: bench._pg_shapes.)

    `first_key`, when the caller knows it, is the key the transaction will lock: its first
    round trip (BEGIN, the settings, and `volcano_open`) claims the request id or reads the
    clock, locks that key's row and reads the head of its line, so the rules decide on what one
    round trip brought. The line can be used until the transaction changes a waiter or a
    heartbeat: every other change to a key's line is made under the key's row lock.
    """

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        offset: Callable[[], int],
        first_key: tuple[int, str] | None,
        commits: Commits,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        on_locked: OnLocked | None = None,
    ) -> None:
        self._conn = conn
        self._on_locked = on_locked
        self._monotonic = monotonic
        self._commits = commits
        self._cursor = psycopg.ClientCursor(conn)
        self._queued: list[str] = []  # bound statements for the next round trip
        self._offset = offset
        self._now: int | None = None
        self._first_key = first_key
        self._locked: dict[tuple[int, str], _LockedKey] = {}
        # Heads of lines read right after their key was locked, until a waiter row changes.
        self._lines: dict[tuple[int, str], Sequence[Sequence[Any]]] = {}
        # The servers watching each locked key, read along with it.
        self._watchers: dict[tuple[int, str], tuple[str, ...]] = {}
        # Set by writes that must outlast a crash or a failover: what a client may be told
        # (leases, outcomes), places in line and heartbeats (their requests and servers live on).
        self.durable = False
        self.committed_us: int | None = None
        self.committed_at: float | None = None
        self._before_us: int | None = None  # `commit_before`'s bound, on the storage clock

    def begin(self, limits: tuple[str, tuple[str, ...]]) -> None:
        self._send(_BEGIN, ())
        self._send(*limits)

    def commit(self) -> None:
        """Send the queued writes with COMMIT, and wait for it.

        A transaction that wrote nothing durable (a waiter stepping out of line, a place given
        up, a placeholder) does not wait for the WAL flush: losing it in a crash or a failover
        changes no answer, the step is taken again.
        """
        for locked in self._locked.values():
            leftover = locked.leftover()
            if leftover is not None:
                self._send(*leftover)
        if self._before_us is not None:
            # In the same round trip, just before COMMIT: a lease this transaction kept live
            # must not have expired since its clock read (`WriteTx.commit_before`).
            self._queued.append(_STILL_BEFORE.format(bound=self._before_us - self._offset()))
        if not self.durable:
            self._send("SET LOCAL synchronous_commit TO off", ())
        self._send("COMMIT", ())
        # The clock once the commit is done, in the same round trip (its own implicit
        # transaction): what an answer telling of a lease is judged by before it is sent,
        # counting every delay from before the round trip went out (its answer may be held
        # longer than any ttl: the time since the result came back is not enough).
        asked_at = self._monotonic()
        try:
            with self._commits.bounded(self._conn):
                (clock_us,) = _one(self._ask(_CLOCK, ()))
        except psycopg.Error as exc:
            if exc.sqlstate == _STALE_CLOCK:
                raise StaleClock(f"postgresql: {_one_line(exc)}") from exc
            raise
        self.committed_us = clock_us + self._offset()
        self.committed_at = asked_at

    def now_us(self) -> int:
        if self._now is None:
            if self._first_key is not None:
                self._open(*self._first_key, None)
            else:
                self._set_now(_one(self._ask(_CLOCK, ()))[0])
        assert self._now is not None  # noqa: S101 - just set
        return self._now

    def _open(self, project_id: int, key: str, request_id: str | None) -> StoredOutcome | None:
        """One round trip: claim `request_id` (or read the clock), lock the key, read its line."""
        self._first_key = None
        *claimed, clock_us, token, limit, version, leases, line, watchers, floor = _one(
            self._ask(_OPEN, (project_id, key, request_id, _LINE_AHEAD))
        )
        self._set_now(clock_us)
        row = _row(project_id, key, (token, limit, version), leases)
        if row is None and floor:
            row = LockRow.purged(project_id, key, floor)
        self._locked[project_id, key] = _LockedKey(row, project_id, key)
        self._lines[project_id, key] = line
        self._watchers[project_id, key] = tuple(watchers)
        if self._on_locked is not None:
            self._on_locked()
        return None if request_id is None else StoredOutcome(*claimed)

    def _set_now(self, clock_us: int) -> None:
        if self._now is None:
            self._now = clock_us + self._offset()

    def load_lock(self, project_id: int, key: str) -> LockRow | None:
        if (project_id, key) not in self._locked:
            self._open(project_id, key, None)
        return self._locked[project_id, key].row

    def load_locks(
        self,
        project_id: int,
        keys: Sequence[str],
        *,
        owners: Mapping[str, Collection[str]] | None = None,
    ) -> dict[str, LockRow | None]:
        """One round trip: lock the keys' rows in key order, then read the clock and leases.

        Keys without a row get no placeholder: a renewal of one is refused, and creates none.
        """
        self._first_key = None
        params = (project_id, list(keys))
        owners = owners or {}
        pairs = [(key, owner) for key in keys if key in owners for owner in sorted(owners[key])]
        self._send(_LOCK_KEYS, params)
        self._send(_CLOCK, ())
        self._send(_LEASES_OF_KEYS, (project_id, [key for key in keys if key not in owners]))
        named = ([key for key, _ in pairs], [owner for _, owner in pairs], project_id)
        self._send(_LEASES_OF_OWNERS, named)
        locked, (clock,), leases, of_owners, watching = self._ask_sets(_WATCHERS_OF_KEYS, params, 5)
        self._now = clock[0] + self._offset()  # after every lock: the batch's one clock
        of_key: dict[str, list[Sequence[Any]]] = {}
        for key, *lease in (*leases, *of_owners):  # each query reads a key's leases in order
            of_key.setdefault(key, []).append(lease)
        watchers: dict[str, list[str]] = {}
        for key, server_id in watching:
            watchers.setdefault(key, []).append(server_id)
        found: dict[str, LockRow | None] = dict.fromkeys(keys)
        for key, *fields in locked:
            row = _row(project_id, key, fields, of_key.get(key, ()))
            found[key] = row
            if row is not None:
                self._locked[project_id, key] = _LockedKey(row, project_id, key)
                self._watchers[project_id, key] = tuple(watchers.get(key, ()))
        return found

    def save_lock(self, row: LockRow, loaded: LockRow | None) -> None:
        self.durable = True
        for statement, params in lock_writes(row, loaded, self.now_us()):
            self._send(for_postgres(statement), params)
        locked = self._locked.get((row.project_id, row.key))
        if locked is not None:
            locked.replaced()

    def save_locks(self, changes: Sequence[tuple[LockRow, LockRow | None]]) -> None:
        for row, loaded in changes:  # queued: they go with COMMIT, one round trip
            self.save_lock(row, loaded)

    def commit_before(self, bound_us: int) -> None:
        if self._before_us is None or bound_us < self._before_us:
            self._before_us = bound_us

    def waiting_count(self, project_id: int, key: str) -> int:
        return int(_one(self._ask(_WAITING_COUNT, (project_id, key)))[0])

    def live_counts(self, project_id: int, key: str) -> tuple[int, int | None]:
        now = self.now_us()
        live, _, highest = _one(self._ask(_LEASE_COUNTS, (now, now, now, project_id, key)))
        return int(live), highest

    def key_count(self, project_id: int) -> int:
        return int(_one(self._ask(_KEY_COUNT, (project_id,)))[0])

    def summarize(self, project_id: int, key: str, *, holders: int) -> LockSummary | None:
        """The key's row as this transaction locked it (whole), summarized."""
        row = self.load_lock(project_id, key)
        if row is None:
            return None
        waiting = self.waiting_count(project_id, key)
        return LockSummary.of(row, self.now_us(), waiting, holders=holders)

    def claim_request(self, project_id: int, request_id: str) -> StoredOutcome | None:
        if self._first_key is not None and self._first_key[0] == project_id:
            outcome = self._open(*self._first_key, request_id)
        else:
            outcome = StoredOutcome(*_one(self._ask(_CLAIM, (project_id, request_id))))
        assert outcome is not None  # noqa: S101 - a request id was claimed
        if outcome.expires_at_us <= self.now_us():
            return None
        # A replay tells the client the outcome again: commit the claim's touch of it durably,
        # which waits until the standby has that outcome too (see `_replication.Commits`).
        self.durable = True
        return outcome

    def save_outcome(self, project_id: int, request_id: str, outcome: StoredOutcome) -> None:
        self.durable = True
        self._send(
            _SAVE_OUTCOME,
            (
                project_id,
                request_id,
                outcome.fingerprint,
                outcome.status,
                outcome.body,
                outcome.retry_after,
                outcome.expires_at_us,
                outcome.undelivered,
            ),
        )

    def queued(self, project_id: int, key: str, limit: int) -> list[Waiter]:
        rows = self._lines.get((project_id, key))
        if rows is None or (len(rows) == _LINE_AHEAD and limit > _LINE_AHEAD):
            rows = self._ask(_QUEUED, (project_id, key, limit)).fetchall()
        now = self.now_us()
        return [_waiter(row, now) for row in rows[:limit]]

    def find_waiter(self, project_id: int, key: str, owner_token: str) -> Waiter | None:
        row = self._ask(_FIND_WAITER, (project_id, key, owner_token)).fetchone()
        return None if row is None else _waiter(row, self.now_us())

    def add_waiter(
        self,
        project_id: int,
        key: str,
        owner_token: str,
        ttl_seconds: float,
        server_id: str,
        *,
        label: str | None = None,
        shared: bool = False,
        seq: int | None = None,
    ) -> int:
        self.durable = True  # a place in line must outlast a failover: its request does
        self._lines.clear()
        values = (project_id, key, owner_token, ttl_seconds, server_id, label, shared)
        if seq is not None:  # a place held before: the sequence gave it out already
            self._send(_ADD_WAITER_AT, (seq, *values))
            return seq
        (added,) = _one(self._ask(_ADD_WAITER, values))
        return int(added)

    def update_waiter(
        self,
        seq: int,
        *,
        state: WaiterState,
        until_us: int | None,
        server_id: str,
        ttl_seconds: float,
        label: str | None = None,
        shared: bool = False,
    ) -> None:
        self._lines.clear()
        if state == "waiting":
            self.durable = True  # back in line: as add_waiter
        self._send(
            "UPDATE lock_waiters SET state = %s, until_us = %s, server_id = %s,"
            " ttl_seconds = %s, label = %s, shared = %s WHERE seq = %s",
            (state, until_us, server_id, ttl_seconds, label, shared, seq),
        )

    def delete_waiter(self, project_id: int, key: str, owner_token: str) -> None:
        self._lines.clear()
        self._send(
            "DELETE FROM lock_waiters WHERE project_id = %s AND key = %s AND owner_token = %s",
            (project_id, key, owner_token),
        )

    def touch_server(self, server_id: str, alive_until_us: int) -> None:
        # Durable, one flush per server a second: a heartbeat a restart or a failover lost
        # after it was written would make others judge a live server dead (see `_pulse`).
        self.durable = True
        self._lines.clear()  # a heartbeat read with a line may have moved
        self._send(_TOUCH_SERVER, (server_id, alive_until_us))

    def others_alive(self, server_id: str) -> bool:
        row = self._ask(
            "SELECT 1 FROM servers WHERE server_id != %s AND alive_until_us > %s LIMIT 1",
            (server_id, self.now_us()),
        ).fetchone()
        return row is not None

    def announce(self, server_id: str, seq: int) -> None:
        self._send("SELECT pg_notify(%s, %s)", (HANDOFF_CHANNEL, f"{server_id} {seq}"))

    def watched_by(self, project_id: int, key: str) -> tuple[str, ...]:
        if (project_id, key) not in self._locked:
            self._open(project_id, key, None)
        return self._watchers.get((project_id, key), ())

    def watch(self, project_id: int, key: str, server_id: str, generation: int) -> None:
        # Durable: a watch a failover lost would leave this server's watchers unwoken by
        # changes made through others (each listener reconnection records them again too).
        self.durable = True
        self._send(_WATCH, (project_id, key, server_id, generation))

    def announce_change(self, project_id: int, key: str) -> None:
        self._send("SELECT pg_notify(%s, %s)", (CHANGE_CHANNEL, f"{project_id} {key}"))

    def _send(self, query: str, params: tuple[object, ...]) -> None:
        """Queue `query`, bound, to go with the next round trip."""
        self._queued.append(self._cursor.mogrify(query, params) if params else query)

    def _ask_sets(
        self, query: str, params: tuple[object, ...], count: int
    ) -> list[list[tuple[Any, ...]]]:
        """As `_ask`, returning the rows of the last `count` statements that return rows."""
        self._send(query, params)
        statements, self._queued = "; ".join(self._queued), []
        cursor = self._cursor
        cursor.execute(statements, prepare=False)
        sets = [cursor.fetchall() if cursor.description is not None else None]
        while cursor.nextset():
            sets.append(cursor.fetchall() if cursor.description is not None else None)
        return [rows for rows in sets if rows is not None][-count:]

    def _ask(self, query: str, params: tuple[object, ...]) -> psycopg.ClientCursor[Any]:
        """Send everything queued and `query` as one query; wait, and return `query`'s result.

        Without parameters psycopg sends it with the simple protocol, several statements in one
        message; the first that fails ends the message, and the error is raised here.
        """
        self._send(query, params)
        statements, self._queued = "; ".join(self._queued), []
        cursor = self._cursor
        cursor.execute(statements, prepare=False)  # no parameters: sent as it is
        while cursor.nextset():
            pass
        return cursor


class PostgresStorage(KeyAdmin):
    """Lock storage in a PostgreSQL (or PostgreSQL-compatible) database, through a pool.

    `url` is a libpq URL (`postgresql://user:password@host:port/dbname?sslmode=...`); its
    optional `pool_size` parameter caps this process's connections (default 10).
    `clock_offset_us` exists for tests only: it is added to the database clock so a test can
    move time forward. Production never sets it.
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int | None = None,
        min_connections: int = 1,
        connect_timeout: int = 3,
        pool_timeout: float = 3.0,
        lock_timeout: float = 3.0,
        statement_timeout: float = 5.0,
        silence_timeout: float = 2.0,
        clock_offset_us: Callable[[], int] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url_for_display = redact_url(url)
        self.monotonic = monotonic
        self.runs_inline = False  # network round trips: always from a worker thread
        self.pushes_handoffs = True
        conninfo, url_pool_size = _conninfo(url, connect_timeout)
        self._conninfo = conninfo
        size = pool_size or url_pool_size or 10
        self.connections = size
        self._offset = clock_offset_us or _offset_none
        self._pool_timeout = pool_timeout
        self._commits = Commits(statement_timeout)
        with _mapped_errors():
            _migrate(conninfo)
            with psycopg.connect(conninfo, prepare_threshold=None) as conn:
                check_durability(conn, hosts=host_count(conninfo_to_dict(conninfo)))
                known = _known_settings(conn, _SILENCE_SETTINGS)
        self._limits = _limits_statement(
            {
                "lock_timeout": _ms(lock_timeout),
                "statement_timeout": _ms(statement_timeout),
                "idle_in_transaction_session_timeout": _ms(silence_timeout),
                # First keepalive probe after a second of silence, the next a second later; the
                # connection ends at the first probe past `silence_timeout` without an answer.
                "tcp_keepalives_idle": "1",
                "tcp_keepalives_interval": "1",
                "tcp_user_timeout": str(round(silence_timeout * 1000)),
            },
            skip=set(_SILENCE_SETTINGS) - known,
        )
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] = (
            psycopg_pool.ConnectionPool(
                conninfo,
                kwargs={"autocommit": True, "prepare_threshold": None},
                min_size=min(min_connections, size),
                max_size=size,
                open=False,
                name="volcano",
                timeout=pool_timeout,
                # Give up on a reconnection soon, so a pool that lost every connection grows
                # again on the next request instead of sleeping through a long backoff.
                reconnect_timeout=5.0,
            )
        )
        self._pool.open(wait=False)

    @contextmanager
    def write(
        self,
        *,
        may_block: bool = True,
        key: tuple[int, str] | None = None,
        on_locked: OnLocked | None = None,
    ) -> Iterator[_WriteTx]:
        """One READ COMMITTED transaction, committed when the block ends without an error.

        `key`, the (project id, key) whose row the transaction will lock, is locked in its
        first round trip, and then `on_locked` is called (in this thread).
        """
        if not may_block:
            raise WouldBlock  # every statement is a network round trip
        with _mapped_errors(), self._connection() as conn:
            try:
                tx = _WriteTx(
                    conn, self._offset, key, self._commits, self.monotonic, on_locked=on_locked
                )
                tx.begin(self._limits)
                yield tx
                tx.commit()
            except BaseException:
                _roll_back(conn)
                raise

    @contextmanager
    def read(self, *, may_block: bool = True) -> Iterator[_ReadTx]:
        """Reads on a pooled connection, outside any transaction."""
        if not may_block:
            raise WouldBlock
        with _mapped_errors(), self._connection() as conn:
            yield _ReadTx(conn, self._offset)

    async def synced(self, *, here: bool = False) -> None:
        """Nothing to wait for: a commit is durable when it returns."""

    def find_key(self, key_hash: bytes, *, may_block: bool = True) -> KeyRecord | None:
        """The key with this hash, if any."""
        if not may_block:
            raise WouldBlock
        with _mapped_errors(), self._connection() as conn:
            row = conn.execute(
                "SELECT project_id, kind, revoked_at_us IS NOT NULL FROM api_keys"
                " WHERE key_hash = %s",
                (key_hash,),
            ).fetchone()
        return KeyRecord.from_row(key_hash, row)

    def check(self) -> None:
        """Raise StorageUnavailable unless a pooled connection answers a query now."""
        with _mapped_errors(), self._connection() as conn:
            _fetch(conn, "SELECT 1", ())

    @contextmanager
    def _admin(self) -> Iterator[tuple[Sql, int]]:
        """One READ COMMITTED transaction for key administration.

        A concurrent creator of the same project makes the INSERT wait, then do nothing, and
        the next statement sees the committed row.
        """

        def sql(statement: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
            cursor = conn.execute(statement.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description is not None else []

        with _mapped_errors(), self._connection() as conn, conn.transaction():
            conn.execute(*self._limits)
            yield sql, _fetch(conn, _CLOCK, ())[0]

    def purge_outcomes(self, limit: int) -> int:
        """Delete up to `limit` outcomes whose retention has ended; return how many."""
        with _mapped_errors(), self._connection() as conn:
            return conn.execute(_PURGE, (self._offset(), limit)).rowcount

    def purge_leases(self, limit: int) -> list[ExpiredLease]:
        """Delete up to `limit` keys' expired leases, moving each key's version past them."""
        with _mapped_errors(), self._connection() as conn, conn.transaction():
            conn.execute(*self._limits)
            now = _fetch(conn, _CLOCK, ())[0] + self._offset()
            keys = conn.execute(_EXPIRED_KEYS, {"now": now, "limit": limit}).fetchall()
            if not keys:
                return []
            projects, names = [p for p, _ in keys], [k for _, k in keys]
            values = {"now": now, "projects": projects, "keys": names}
            expired = conn.execute(_DELETE_EXPIRED, values).fetchall()
            for statement, params in bump_versions(expired):
                conn.execute(for_postgres(statement), params)
            return ended_of(expired)

    def purge_members(self, limit: int) -> int:
        """Delete expired members of up to `limit` groups, moving each group's version past them."""
        with _mapped_errors(), self._connection() as conn, conn.transaction():
            conn.execute(*self._limits)
            now = _fetch(conn, _CLOCK, ())[0] + self._offset()
            groups = conn.execute(_EXPIRED_GROUPS, {"now": now, "limit": limit}).fetchall()
            if not groups:
                return 0
            values = {
                "now": now,
                "projects": [p for p, _ in groups],
                "names": [name for _, name in groups],
            }
            expired = conn.execute(_DELETE_EXPIRED_MEMBERS, values).fetchall()
            for statement, params in bump_groups(expired):
                conn.execute(for_postgres(statement), params)
            return len(expired)

    def purge_keys(self, idle_us: int, limit: int) -> int:
        """Delete up to `limit` keys unused for `idle_us`, raising their projects' floors."""
        with _mapped_errors(), self._connection() as conn, conn.transaction():
            conn.execute(*self._limits)
            now = _fetch(conn, _CLOCK, ())[0] + self._offset()
            idle = conn.execute(_IDLE_KEYS, (now - idle_us, limit)).fetchall()
            if not idle:
                return 0
            values = {"projects": [row[0] for row in idle], "keys": [row[1] for row in idle]}
            deleted = conn.execute(_DELETE_IDLE, values).fetchall()
            for statement, params in raise_floors(deleted):
                conn.execute(for_postgres(statement), params)
            return len(deleted)

    def purge_waiters(self, grace_us: int, limit: int, *, judges: Callable[[int], bool]) -> int:
        """Delete up to `limit` waiters gone for good, and the heartbeats of dead servers."""
        with _mapped_errors(), self._connection() as conn, conn.transaction():
            conn.execute(*self._limits)
            (now,) = _fetch(conn, _CLOCK, ())
            now += self._offset()
            if not judges(now):
                return 0
            values = {"now": now, "grace": grace_us, "limit": limit}
            gone = conn.execute(_PURGE_WAITERS, values).rowcount
            conn.execute(_PURGE_WATCHES, values)
            conn.execute(_PURGE_SERVERS, values)
            return gone

    def unwatch(self, server_id: str, watches: Sequence[tuple[int, str, int]]) -> None:
        """Forget these watches of `server_id`, each only while still of its generation."""
        if not watches:
            return
        projects, keys, generations = (list(column) for column in zip(*watches, strict=True))
        with _mapped_errors(), self._connection() as conn:
            conn.execute(_UNWATCH, (server_id, projects, keys, generations))

    async def listen(self, listener: Listener) -> None:
        """LISTEN for reservations and changes on a connection of its own, reconnecting.

        Reconnection is tried every second at most: announcements made meanwhile are lost
        (`listener.connected` makes up for them), so after a failover or a restart every
        second without it is a second the server's waiters and watchers may wait for nothing.
        """
        pause = 0.2
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
            except psycopg.Error as exc:
                log.warning("listening for hand-offs: cannot connect, retrying: %s", _one_line(exc))
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            try:
                async with conn:
                    await conn.execute(f"LISTEN {HANDOFF_CHANNEL}")
                    await conn.execute(f"LISTEN {CHANGE_CHANNEL}")
                    pause = 0.2
                    listener.connected()
                    async for notify in conn.notifies():
                        heard(listener, notify.channel, notify.payload)
            except psycopg.Error as exc:
                log.warning(
                    "listening for hand-offs: connection lost, reconnecting: %s", _one_line(exc)
                )
                await asyncio.sleep(pause)

    def close(self) -> None:
        """Close the pool and its connections."""
        self._pool.close()
        self._commits.close()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        conn = self._checked_out()
        try:
            yield conn
        except psycopg.Error as exc:
            if exc.sqlstate == _READ_ONLY:
                # A standby, or a primary being demoted: the pool's next connection finds the
                # host that takes writes (see `_replication.writer_only`).
                conn.close()
            raise
        finally:
            self._pool.putconn(conn)

    def _checked_out(self) -> psycopg.Connection[Any]:
        """A pooled connection that the server has not closed while it sat idle.

        A restarted database (or `pg_terminate_backend`) leaves every idle connection dead;
        the server's goodbye makes the socket readable, which costs nothing to notice, so
        those are discarded here instead of failing a request each.
        """
        deadline = time.monotonic() + self._pool_timeout
        while True:
            conn = self._pool.getconn(timeout=max(deadline - time.monotonic(), 0.01))
            if not conn.closed and not _has_input(conn):
                return conn
            conn.close()  # the pool replaces a closed connection
            self._pool.putconn(conn)


def heard(listener: Listener, channel: str, payload: str) -> None:
    """Pass one notification on to `listener` (one of another version's is ignored)."""
    first, _, second = payload.partition(" ")
    if channel == HANDOFF_CHANNEL and second.isdigit():
        listener.reserved(first, int(second))
    elif channel == CHANGE_CHANNEL and first.isdigit() and second:
        listener.changed(int(first), second)


def _has_input(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection has something to read: only an error or end of stream."""
    try:
        fd = conn.fileno()
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError, psycopg.Error):
        return True


def _fetch(
    conn: psycopg.Connection[Any], query: str, params: tuple[object, ...]
) -> tuple[Any, ...]:
    return _one(conn.execute(query, params))


def _one(cursor: psycopg.Cursor[Any]) -> tuple[Any, ...]:
    """The one row a statement returns (an INSERT ... RETURNING, a clock read)."""
    row = cursor.fetchone()
    if row is None:
        raise psycopg.InternalError("a statement that returns a row returned none")
    return tuple(row)


def _roll_back(conn: psycopg.Connection[Any]) -> None:
    """End a failed transaction; a connection that cannot is closed (the pool replaces it)."""
    if conn.closed:
        return
    try:
        if conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
    except psycopg.Error:
        conn.close()


def _migrate(conninfo: str) -> None:
    """Bring the schema to `_SCHEMA_VERSION`, one server at a time.

    A schema already current is only read, so servers may run as a role that cannot create
    tables once `volcano-server migrate` has run as one that can.
    """
    with psycopg.connect(conninfo, prepare_threshold=None) as conn:
        if _schema_version(conn) == _SCHEMA_VERSION:
            return
        conn.execute("SELECT set_config('lock_timeout', '60s', true)")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS volcano_schema (version integer NOT NULL)")
        version = _schema_version(conn)  # again: another server may have migrated meanwhile
        for target in range(version + 1, _SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                conn.execute(statement)
            conn.execute("DELETE FROM volcano_schema")
            conn.execute("INSERT INTO volcano_schema (version) VALUES (%s)", (target,))
        # Leaving the block commits, which also releases the advisory lock.


def _known_settings(conn: psycopg.Connection[Any], names: tuple[str, ...]) -> set[str]:
    """Which of the settings `names` the database has."""
    rows = conn.execute("SELECT name FROM pg_settings WHERE name = ANY(%s)", (list(names),))
    return {name for (name,) in rows}


def _limits_statement(settings: dict[str, str], *, skip: set[str]) -> tuple[str, tuple[str, ...]]:
    """One statement setting each of `settings` for the transaction only (SET LOCAL)."""
    names = [name for name in settings if name not in skip]
    calls = ", ".join(f"set_config('{name}', %s, true)" for name in names)
    return f"SELECT {calls}", tuple(settings[name] for name in names)


def _schema_version(conn: psycopg.Connection[Any]) -> int:
    """The database's schema version (0 when empty); newer than this server's is an error."""
    (exists,) = _fetch(conn, "SELECT to_regclass('volcano_schema') IS NOT NULL", ())
    version = (
        _fetch(conn, "SELECT coalesce(max(version), 0) FROM volcano_schema", ())[0] if exists else 0
    )
    if version > _SCHEMA_VERSION:
        raise RuntimeError(
            f"the database has schema version {version}; this server knows {_SCHEMA_VERSION}"
        )
    return int(version)


def _conninfo(url: str, connect_timeout: int) -> tuple[str, int | None]:
    """The libpq connection string for `url`, with bounded timeouts, and its pool size."""
    parts = urlsplit(url)
    # Take out our parameters and leave libpq's untouched: libpq decodes %XX but not "+".
    ours: dict[str, str] = {}
    kept: list[str] = []
    for segment in filter(None, parts.query.split("&")):
        name, _, value = segment.partition("=")
        if unquote(name) in _POOL_PARAMETERS:
            ours[unquote(name)] = unquote(value)
        else:
            kept.append(segment)
    libpq_url = parts._replace(query="&".join(kept)).geturl() if ours else url
    pool_size: int | None = None
    if "pool_size" in ours:
        value = ours["pool_size"]
        if not value.isdigit() or not 1 <= int(value) <= 1000:
            raise UnsupportedDatabaseURL(f"pool_size must be 1 to 1000, got {value!r}")
        pool_size = int(value)
    try:
        params = conninfo_to_dict(libpq_url)
    except psycopg.Error as exc:
        message = _one_line(exc)
        if parts.password:
            message = message.replace(parts.password, "***")
        raise UnsupportedDatabaseURL(
            f"invalid PostgreSQL URL {redact_url(url)}: {message}"
        ) from None
    params = writer_only(params)
    # An unreachable database must fail a request within seconds, never hang it.
    params.setdefault("connect_timeout", connect_timeout)
    for setting, default in NETWORK_DEFAULTS.items():
        params.setdefault(setting, default)
    params.setdefault("application_name", "volcano-server")
    return make_conninfo("", **params), pool_size


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _unavailable(exc: Exception) -> str | None:
    """Why `exc` means PostgreSQL cannot serve now (answered 503), or None for a bug."""
    if isinstance(exc, psycopg_pool.PoolClosed):
        return "the server is shutting down"
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return f"postgresql: no connection available: {_one_line(exc)}"
    if isinstance(exc, psycopg.OperationalError) or (
        isinstance(exc, psycopg.Error) and exc.sqlstate in _UNAVAILABLE_SQLSTATES
    ):
        return f"postgresql: {_one_line(exc)}"
    return None


def _mapped_errors() -> AbstractContextManager[None]:
    return unavailable_when(_unavailable)
