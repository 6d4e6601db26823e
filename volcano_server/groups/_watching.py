"""Reading a group for its watchers: the group half of `_watching`'s machinery.

A group is watched as a key is (`Watches`), under its watch key (`storage._groups.watch_key`:
`/` and its name, which no lock key can be): its watchers on this server share one read at a
time, woken by this server's commits, by other servers' announcements (PostgreSQL records the
watch under the group's row lock, as a key's under its row lock), by polling a shared SQLite
file, and by a timer at its soonest member's expiry (an expiry moves its version with no
write). These are the two readings `Watches` is given for such keys: a plain read, and a read
that records this server's watch first. A group that does not exist is `404 group_not_found`,
which a watcher gets at once, whatever version it saw.
"""

from __future__ import annotations

from ..locks._registry import KeyRef
from ..locks._watching import KeyView
from ..storage import Storage
from ..storage._groups import GroupCounts, GroupRow, group_of_watch_key
from ..wire._wire import Answer, dumps
from ._rules import group_not_found, group_state

__all__ = ["read_group", "record_group"]


def _view(row: GroupRow, counts: GroupCounts, now: int) -> KeyView:
    state = group_state(row, counts)
    soonest = counts.soonest_us
    expires_in = None if soonest is None else (soonest - now) / 1_000_000
    return KeyView(state["version"], Answer(200, dumps(state)), expires_in)


def _group(key_ref: KeyRef) -> tuple[int, str]:
    project_id, key = key_ref
    group = group_of_watch_key(key)
    if group is None:
        raise ValueError(f"{key!r} is not a group's watch key")
    return project_id, group


def read_group(storage: Storage, key_ref: KeyRef, *, may_block: bool) -> KeyView:
    """Read the group's state (raises 404 group_not_found when it does not exist)."""
    project_id, group = _group(key_ref)
    with storage.read(may_block=may_block) as tx:
        now = tx.now_us()
        row = tx.load_group(project_id, group)
        if row is None or not row.live:
            raise group_not_found(group)
        counts = tx.group_counts(project_id, group, now)
    return _view(row, counts, now)


def record_group(
    storage: Storage,
    key_ref: KeyRef,
    *,
    server_id: str,
    generation: int,
    lifetime_us: int,
    may_block: bool,
) -> KeyView:
    """Record this server's watch of the group under its row lock, and read its state."""
    project_id, group = _group(key_ref)
    with storage.write(may_block=may_block) as tx:
        row = tx.lock_group(project_id, group)  # see `_watching`: a change then sees the record
        now = tx.now_us()
        if row is None or not row.live:
            raise group_not_found(group)
        tx.watch(project_id, key_ref[1], server_id, generation)
        tx.touch_server(server_id, now + lifetime_us)  # never purged as a dead server's
        counts = tx.group_counts(project_id, group, now)
    return _view(row, counts, now)
