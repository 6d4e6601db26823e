"""`Pulse`: a server judges others' heartbeats only while its own is alive and has run without
a lapse for a lifetime (one that lapsed before that run, only once it has run a recovery time
more), all by the storage clock. `judges(now, now)`: a heartbeat that has just run out."""

from __future__ import annotations

from volcano_server.locks._pulse import Pulse

SECOND = 1_000_000
LIFETIME = 3 * SECOND


def beats(pulse: Pulse, *seconds: float) -> None:
    """Heartbeats written, dated at each of `seconds` (storage clock)."""
    for at in seconds:
        pulse.beat(round(at * SECOND))


class TestPulse:
    def test_not_before_its_first_beat(self) -> None:
        """A server that has not written a heartbeat yet judges nobody's."""
        assert not Pulse(LIFETIME).judges(160 * SECOND, 160 * SECOND)

    def test_after_a_lifetime_of_beats(self) -> None:
        """Beats written for a whole lifetime without a lapse make others' judgeable."""
        pulse = Pulse(LIFETIME)
        beats(pulse, 100, 101, 102)
        assert not pulse.judges(
            round(102.5 * SECOND), round(102.5 * SECOND)
        )  # 2.5 s since the first
        assert pulse.judges(103 * SECOND, 103 * SECOND)

    def test_a_failed_beat_ends_the_run(self) -> None:
        """A beat that could not be written: nobody is judged until a new run has lasted."""
        pulse = Pulse(LIFETIME)
        beats(pulse, 100, 101, 102, 103)
        pulse.lapsed()
        assert not pulse.judges(round(103.5 * SECOND), round(103.5 * SECOND))
        beats(pulse, 104, 105, 106)
        assert not pulse.judges(round(106.5 * SECOND), round(106.5 * SECOND))
        assert pulse.judges(107 * SECOND, 107 * SECOND)

    def test_an_old_last_beat_judges_nobody(self) -> None:
        """Once the last written beat is a lifetime old (writes hang), others are not judged."""
        pulse = Pulse(LIFETIME)
        beats(pulse, 100, 101, 102, 103, 104)
        assert pulse.judges(105 * SECOND, 105 * SECOND)
        assert not pulse.judges(107 * SECOND, 107 * SECOND)

    def test_after_a_gap_a_whole_lifetime_again(self) -> None:
        """After its own heartbeat lapsed (every other one may have, for the same reason), a
        server judges again only a lifetime after the first beat written since."""
        pulse = Pulse(LIFETIME)
        beats(pulse, 100, 101, 102, 103, 104, 110, 111, 112)
        assert not pulse.judges(round(112.5 * SECOND), round(112.5 * SECOND))
        assert pulse.judges(113 * SECOND, 113 * SECOND)

    def test_a_beat_tells_when_it_begins_a_new_run(self) -> None:
        """beat() is True for the first beat and for one after a lapse or a gap of more than
        a lifetime (others may have judged this server dead meanwhile), False within a run."""
        pulse = Pulse(LIFETIME)
        assert pulse.beat(100 * SECOND)
        assert not pulse.beat(101 * SECOND)
        assert pulse.beat(105 * SECOND)  # a gap: writes hung, none failed
        pulse.lapsed()
        assert pulse.beat(106 * SECOND)

    def test_one_that_lapsed_before_the_run_waits_for_the_recovery(self) -> None:
        """After a lapse of its own, a server whose heartbeat ran out before this run began (in
        the same outage, maybe) is judged only once the run has lasted a lifetime and the
        recovery time; one that ran out during the run, after a lifetime as before. The purge
        asks for any."""
        pulse = Pulse(LIFETIME, recovery_us=10 * SECOND)
        beats(pulse, 90, 91)
        pulse.lapsed()  # the database went away
        beats(pulse, *range(100, 114))
        assert pulse.judges(103 * SECOND, 101 * SECOND)  # ran out while this one beat
        assert not pulse.judges(103 * SECOND, 99 * SECOND)  # before: it may be coming back
        assert not pulse.judges_all(round(112.9 * SECOND))
        assert pulse.judges(113 * SECOND, 99 * SECOND)
        assert pulse.judges_all(113 * SECOND)

    def test_no_recovery_in_the_first_run(self) -> None:
        """From its start (no lapse of its own seen), a server judges every lapsed heartbeat
        after a lifetime: the waiters of a server that crashed before it started (a restart
        on the same database) must not block their keys for the recovery time."""
        pulse = Pulse(LIFETIME, recovery_us=10 * SECOND)
        beats(pulse, 100, 101, 102, 103)
        assert pulse.judges(103 * SECOND, 50 * SECOND)
        assert pulse.judges_all(103 * SECOND)
