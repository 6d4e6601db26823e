"""`Pulse`: a server judges others' heartbeats only while its own is alive and has run without
a lapse for a lifetime."""

from __future__ import annotations

from volcano_server._pulse import Pulse

LIFETIME = 3.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class DatabaseAway(Exception):
    pass


def written_at(pulse: Pulse, clock: Clock, *instants: float) -> None:
    """Heartbeats written, each begun at one of `instants` and taking 10 ms."""
    for instant in instants:
        clock.now = instant
        with pulse.beating():
            clock.now += 0.01


class TestPulse:
    def test_not_before_its_first_beat(self) -> None:
        """A server that has not written a heartbeat yet judges nobody's."""
        clock = Clock()
        pulse = Pulse(LIFETIME, clock)
        clock.now += 60
        assert not pulse.judges_others()

    def test_after_a_lifetime_of_beats(self) -> None:
        """Beats written for a whole lifetime without a lapse make others' judgeable."""
        clock = Clock()
        pulse = Pulse(LIFETIME, clock)
        written_at(pulse, clock, 100, 101, 102)
        assert not pulse.judges_others()  # 2.01 s since the first began
        clock.now = 103.0
        assert pulse.judges_others()

    def test_a_beat_that_is_not_written_does_not_count(self) -> None:
        """A write that fails, or still waits for a database that went away, is no beat: once
        the last written one is a lifetime old, others are no longer judged."""
        clock = Clock()
        pulse = Pulse(LIFETIME, clock)
        written_at(pulse, clock, 100, 101, 102, 103, 104)
        try:
            with pulse.beating():
                raise DatabaseAway
        except DatabaseAway:
            pass
        assert pulse.judges_others()  # the last written beat began 1 s ago
        clock.now = 107.0  # a write hangs meanwhile
        assert not pulse.judges_others()

    def test_after_a_lapse_a_whole_lifetime_again(self) -> None:
        """After its own heartbeat lapsed (every other one may have, for the same reason), a
        server judges again only a lifetime after the first beat written since."""
        clock = Clock()
        pulse = Pulse(LIFETIME, clock)
        written_at(pulse, clock, 100, 101, 102, 103, 104)
        written_at(pulse, clock, 110, 111, 112)
        assert not pulse.judges_others()
        clock.now = 113.0
        assert pulse.judges_others()
