"""`Pulse`: a server judges others' heartbeats only after its own has run unbroken a lifetime."""

from __future__ import annotations

from volcano_server._pulse import Pulse

LIFETIME = 3.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TestPulse:
    def test_not_before_its_first_beat(self) -> None:
        """A server that has not written a heartbeat yet judges nobody's."""
        clock = Clock()
        pulse = Pulse(LIFETIME, clock)
        clock.now += 60
        assert not pulse.judges_others()

    def test_after_a_lifetime_of_beats(self) -> None:
        """Beats written for a whole lifetime without a break make others' judgeable."""
        clock = Clock()
        pulse = Pulse(LIFETIME, clock)
        for _ in range(3):
            pulse.beat(written=True)
            assert not pulse.judges_others()
            clock.now += 1.0
        assert pulse.judges_others()

    def test_a_failed_beat_starts_the_lifetime_over(self) -> None:
        """After a beat that did not reach the database (it was away, so every heartbeat may
        have lapsed), others are judged again only a lifetime after the next written beat."""
        clock = Clock()
        pulse = Pulse(LIFETIME, clock)
        pulse.beat(written=True)
        clock.now += LIFETIME
        assert pulse.judges_others()
        pulse.beat(written=False)
        assert not pulse.judges_others()
        clock.now += 10.0
        pulse.beat(written=True)
        clock.now += LIFETIME - 0.1
        assert not pulse.judges_others()
        clock.now += 0.1
        assert pulse.judges_others()
