"""What the server makes of a database with standbys: the URL's hosts, and durability at start."""

from __future__ import annotations

import attrs
import pytest

from volcano_server.storage import UnsupportedDatabaseURL
from volcano_server.storage._postgres import _conninfo
from volcano_server.storage._replication import Durability, judge, writer_only

ALONE = Durability(
    synchronous_commit="on",
    fsync=True,
    synchronous_standby_names="",
    in_recovery=False,
    standbys=0,
    sync_visible=0,
    synchronous=0,
)
SYNCHRONOUS = attrs.evolve(
    ALONE, synchronous_standby_names="FIRST 1 (pg2)", standbys=1, sync_visible=1, synchronous=1
)


class TestHosts:
    def test_several_hosts_reach_only_the_one_taking_writes(self) -> None:
        """A URL naming several hosts gets target_session_attrs=read-write: a standby refuses
        the session, so connections land on the primary whichever host is first."""
        conninfo, _ = _conninfo("postgresql://u:pw@h1:5432,h2:5433/db?pool_size=4", 3)
        assert "host=h1,h2 port=5432,5433" in conninfo
        assert "target_session_attrs=read-write" in conninfo

    @pytest.mark.parametrize("target", ["read-write", "primary"])
    def test_a_writable_target_is_kept(self, target: str) -> None:
        """read-write and primary both keep standbys out; the URL's choice stands."""
        params = writer_only({"host": "h1,h2", "target_session_attrs": target})
        assert params["target_session_attrs"] == target

    @pytest.mark.parametrize("target", ["any", "read-only", "standby", "prefer-standby"])
    def test_a_target_that_admits_a_standby_is_refused(self, target: str) -> None:
        """With several hosts, a target that could land on a standby is a clear error."""
        with pytest.raises(UnsupportedDatabaseURL, match="could connect to a standby"):
            _conninfo(f"postgresql://h1,h2/db?target_session_attrs={target}", 3)

    def test_one_host_is_left_as_it_is(self) -> None:
        """A single host (a virtual address, a pooler) gets no target: nothing changes."""
        assert writer_only({"host": "db.internal"}) == {"host": "db.internal"}
        assert writer_only({"host": "db", "target_session_attrs": "any"})["host"] == "db"


class TestDurabilityAtStart:
    def test_a_primary_alone_or_with_a_synchronous_standby_is_fine(self) -> None:
        """Durable commits on one database, or waited for by a streaming synchronous standby."""
        assert judge(ALONE, hosts=1).warnings == []
        assert judge(SYNCHRONOUS, hosts=2).warnings == []
        stricter = attrs.evolve(SYNCHRONOUS, synchronous_commit="remote_apply")
        assert judge(stricter, hosts=2).warnings == []
        assert judge(SYNCHRONOUS, hosts=2).refusal is None

    def test_synchronous_commit_off_is_refused(self) -> None:
        """Acknowledged before it is on disk: a crash alone loses leases, so no serving."""
        for facts in (
            attrs.evolve(ALONE, synchronous_commit="off"),
            attrs.evolve(SYNCHRONOUS, synchronous_commit="off"),
        ):
            refusal = judge(facts, hosts=1).refusal
            assert refusal is not None
            assert "synchronous_commit is off" in refusal

    @pytest.mark.parametrize(
        ("facts", "hosts", "phrase"),
        [
            pytest.param(
                attrs.evolve(ALONE, standbys=2),
                1,
                "asynchronous replication to 2",
                id="async-standbys",
            ),
            pytest.param(
                ALONE,
                2,
                "names 2 hosts but this primary has no synchronous standby",
                id="several-hosts-no-sync-standby",
            ),
            pytest.param(
                attrs.evolve(SYNCHRONOUS, synchronous_commit="local"),
                2,
                "synchronous_commit is local",
                id="local-commit",
            ),
            pytest.param(
                attrs.evolve(SYNCHRONOUS, synchronous=0),
                2,
                "no synchronous standby is streaming",
                id="sync-standby-away",
            ),
            pytest.param(attrs.evolve(ALONE, fsync=False), 1, "fsync is off", id="no-fsync"),
            pytest.param(
                attrs.evolve(ALONE, in_recovery=True), 1, "is a standby", id="on-a-standby"
            ),
        ],
    )
    def test_what_only_a_failover_or_a_crash_of_the_machine_would_lose_is_warned(
        self, facts: Durability, hosts: int, phrase: str
    ) -> None:
        """Where losing acknowledged leases depends on what the server cannot see (will this
        standby be promoted, do the hosts share a disk), it serves and says so loudly."""
        verdict = judge(facts, hosts=hosts)
        assert verdict.refusal is None
        assert any(phrase in warning for warning in verdict.warnings), verdict.warnings

    def test_hidden_sync_states_are_not_taken_for_a_missing_standby(self) -> None:
        """A role without pg_read_all_stats sees standbys but not their sync state: no guess."""
        hidden = attrs.evolve(SYNCHRONOUS, sync_visible=0, synchronous=0)
        assert judge(hidden, hosts=2).warnings == []
