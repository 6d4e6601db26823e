"""Connection seats and the open-files budget they need."""

from __future__ import annotations

import pytest

from volcano_server.transport._seats import (
    PRIVATE_BACKLOG,
    PRIVATE_SEATS,
    RESERVED_FILES,
    Arrival,
    Seats,
    files_needed,
    max_connections_within,
)


class TestSeats:
    def test_serving_seats_then_spare_ones_then_refusals_then_drops(self) -> None:
        """100 connections take the serving seats and 25 more the spare ones; the next 50 (half
        the accept queue of 100) are refused, and the one after is dropped."""
        seats = Seats(100, backlog=100)
        assert all(seats.arrive() is Arrival.SEATED and seats.take() for _ in range(100))
        assert all(seats.arrive() is Arrival.SEATED and not seats.take() for _ in range(25))
        assert all(seats.arrive() is Arrival.REFUSED for _ in range(50))
        assert seats.arrive() is Arrival.DROPPED

    def test_seats_are_given_back_when_connections_close(self) -> None:
        """A closed connection's seat goes to the next one; one refused for want of a seat
        holds none, but counts until it has closed."""
        seats = Seats(1, backlog=0)
        assert seats.arrive() is Arrival.SEATED
        assert seats.take()
        seats.leave(serving=True)
        assert seats.arrive() is Arrival.SEATED
        assert seats.take()
        assert seats.taken == 1
        for _ in range(16):
            assert seats.arrive() is Arrival.SEATED
        assert seats.arrive() is Arrival.DROPPED
        seats.leave(serving=False)
        assert seats.arrive() is Arrival.DROPPED  # the one dropped has not closed yet
        seats.leave(serving=False)
        seats.leave(serving=False)
        assert seats.arrive() is Arrival.SEATED

    def test_small_servers_keep_a_few_spare_seats(self) -> None:
        """Even 4 serving seats come with 16 spare ones, for health probes."""
        assert Seats(4, backlog=16).spare == 16

    def test_at_least_one_seat(self) -> None:
        """A server with no seat is refused."""
        with pytest.raises(ValueError, match="at least one"):
            Seats(0, backlog=16)


class Connection:
    """A connection as the seats see it: idle or busy, and whether it was reaped."""

    def __init__(self, *, idle: bool = True) -> None:
        self.is_idle = idle
        self.reaped = False

    def idle(self) -> bool:
        return self.is_idle

    def reap(self) -> None:
        self.reaped = True


class TestKeylessGiveWay:
    def test_a_newcomer_takes_the_seat_of_the_idle_keyless_seated_longest(self) -> None:
        """With every serving seat taken, a newcomer asking for more than a probe gets a
        serving seat: the keyless idle connection seated longest is reaped; keyed and busy ones
        are passed over. Without asking to reap (a probe), it gets none."""
        seats = Seats(3, backlog=0)
        keyed, busy, idle = Connection(), Connection(idle=False), Connection()
        for connection in (keyed, busy, idle):
            assert seats.arrive() is Arrival.SEATED
            assert seats.take(connection)
        seats.keyed(keyed)
        newcomer = Connection()
        assert seats.arrive() is Arrival.SEATED
        assert not seats.take(newcomer)
        assert seats.take(newcomer, reap=True)
        assert (keyed.reaped, busy.reaped, idle.reaped) == (False, False, True)
        assert (seats.taken, seats.reaped) == (3, 1)
        seats.leave(serving=False, connection=idle)  # it closes holding no seat
        assert seats.taken == 3

    def test_the_keyless_connection_asked_least_lately_is_reaped(self) -> None:
        """Keyless clients that all ask at the same moment (the longest seated asking first)
        leave idle ones behind them: a newcomer then reaps one of those, not a busy one, however
        many busy ones were seated before them."""
        seats = Seats(200, backlog=0)
        connections = [Connection() for _ in range(200)]
        for connection in connections:
            seats.arrive()
            seats.take(connection)
        for connection in connections[:150]:  # their periodic requests, oldest first
            connection.is_idle = False
            seats.asked(connection)
        seats.arrive()
        assert seats.take(Connection(), reap=True)
        assert [c for c in connections if c.reaped] == [connections[150]]

    def test_with_none_to_reap_a_newcomer_gets_a_spare_seat(self) -> None:
        """Every seat held by keyed or busy connections: no reaping; the API is not accepting,
        which /readyz reports."""
        seats = Seats(2, backlog=0)
        keyed, busy = Connection(), Connection(idle=False)
        for connection in (keyed, busy):
            seats.arrive()
            seats.take(connection)
        seats.keyed(keyed)
        assert seats.accepting()  # the busy keyless one may become idle
        seats.keyed(busy)
        assert not seats.accepting()
        seats.arrive()
        assert not seats.take(Connection(), reap=True)
        assert seats.reaped == 0

    def test_an_address_past_its_share_is_crowded(self) -> None:
        """With a cap of 2 per address, a third connection from one address is CROWDED; other
        addresses are seated; one leaving makes room again."""
        seats = Seats(10, backlog=10, per_address=2)
        assert seats.arrive("10.0.0.1") is Arrival.SEATED
        assert seats.arrive("10.0.0.1") is Arrival.SEATED
        assert seats.arrive("10.0.0.1") is Arrival.CROWDED
        assert seats.arrive("10.0.0.2") is Arrival.SEATED
        seats.leave(serving=False, address="10.0.0.1")
        seats.leave(serving=False, address="10.0.0.1")
        assert seats.arrive("10.0.0.1") is Arrival.SEATED


class TestFilesBudget:
    def test_budget_holds_every_kind_of_connection(self) -> None:
        """Serving and spare seats, a full accept queue, the private listener's seats and queue
        and the reserve all fit."""
        private = PRIVATE_SEATS + 16 + PRIVATE_BACKLOG
        assert files_needed(10_000, 4_096) == 10_000 + 2_500 + 4_096 + private + RESERVED_FILES

    @pytest.mark.parametrize("files", [600, 1_024, 10_256, 65_536])
    @pytest.mark.parametrize("backlog", [128, 4_096])
    def test_the_cap_fitted_to_a_limit_is_the_largest_that_fits(
        self, files: int, backlog: int
    ) -> None:
        """The cap found for an open-files limit fits it, and one more would not."""
        cap = max_connections_within(files, backlog)
        if files_needed(1, backlog) > files:
            assert cap == 1
        else:
            assert files_needed(cap, backlog) <= files < files_needed(cap + 1, backlog)
