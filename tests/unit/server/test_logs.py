"""The server's log lines: nothing a client sends starts a line, and repeats are held back."""

from __future__ import annotations

import logging

from volcano_server.telemetry._logs import CONTINUATION, TextFormatter, Throttle


def record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("volcano_server", logging.ERROR, __file__, 1, message, args, exc_info)


class TestTextFormatter:
    def test_a_message_with_a_newline_cannot_start_a_line(self) -> None:
        """A line break in a message (a client's text) becomes a continuation line, escaped."""
        text = TextFormatter("%(levelname)s %(message)s").format(
            record("bad %s", "field\n2026-01-01 00:00:00,000 INFO forged\x1b[31m")
        )
        first, second = text.split("\n")
        assert first == "ERROR bad field"
        assert second == CONTINUATION + "2026-01-01 00:00:00,000 INFO forged\\x1b[31m"

    def test_a_traceback_is_indented_and_escaped(self) -> None:
        """Every line of a traceback starts with the continuation mark; a surrogate or newline
        in the exception's message is escaped or indented like the rest."""
        try:
            raise ValueError("unknown field '\ud800\n2026-01-01 00:00:00,000 INFO forged'")
        except ValueError as caught:
            exc = caught
        text = TextFormatter("%(message)s").format(record("internal error", exc=exc))
        lines = text.split("\n")
        assert lines[0] == "internal error"
        assert len(lines) > 3
        assert all(line.startswith(CONTINUATION) for line in lines[1:])
        assert all(line.isascii() and line.isprintable() for line in lines)
        assert "\\ud800" in text


class TestThrottle:
    def test_one_of_a_kind_a_minute_then_the_count_held_back(self) -> None:
        """The first of a kind is logged; repeats within the period are held back and counted
        into the next one logged; other kinds are independent."""
        now = [0.0]
        throttle = Throttle(60.0, clock=lambda: now[0])
        assert throttle.allow("a") == 0
        assert throttle.allow("a") is None
        assert throttle.allow("a") is None
        assert throttle.allow("b") == 0
        now[0] = 60.0
        assert throttle.allow("a") == 2
        assert throttle.allow("a") is None
