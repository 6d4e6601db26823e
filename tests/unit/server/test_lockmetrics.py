"""The lock metrics' pure parts: key prefixes, bounded series, how a wait ended, the settings."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from volcano_server import ServerConfig
from volcano_server.locks._registry import Phase
from volcano_server.locks._waiters import wait_outcome
from volcano_server.telemetry._lockmetrics import (
    OTHER_KEYS,
    End,
    Ended,
    Grant,
    Granted,
    Joined,
    KeyPrefixes,
    LockMetrics,
    Waited,
)
from volcano_server.wire._wire import Answer


def series(registry: CollectorRegistry) -> list[tuple[str, dict[str, str]]]:
    """Every sample's name and labels in a scrape of `registry`."""
    text = generate_latest(registry).decode()
    return [
        (sample.name, sample.labels)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


class TestKeyPrefixes:
    def test_the_longest_listed_prefix_labels_a_key(self) -> None:
        """A key counts under the longest listed prefix it starts with, else _other."""
        prefixes = KeyPrefixes(["jobs:", "jobs:daily:", "cache-"])
        assert prefixes("jobs:daily:report") == "jobs:daily:"
        assert prefixes("jobs:hourly") == "jobs:"
        assert prefixes("cache-7") == "cache-"
        assert prefixes("daily-report") == OTHER_KEYS
        assert prefixes.labels == ("cache-", "jobs:", "jobs:daily:", OTHER_KEYS)


class TestSeries:
    def test_no_label_names_a_key_by_default(self) -> None:
        """Without prefixes the lock metrics carry outcome labels only, whatever the keys."""
        registry = CollectorRegistry()
        metrics = LockMetrics(registry)
        metrics.record([Granted("secret-key-1", Grant.IMMEDIATE), Joined("secret-key-2", 3)])
        metrics.record([Ended("secret-key-3", End.RELEASED, 1_500_000)])
        metrics.waited("secret-key-4", Waited.GRANTED, 0.2)
        metrics.checked("secret-key-5", live=True)
        scraped = series(registry)
        assert {name for labels in (labels for _, labels in scraped) for name in labels} <= {
            "outcome",
            "result",
            "le",
        }
        assert "secret-key" not in generate_latest(registry).decode()

    def test_the_series_do_not_grow_with_the_keys_used(self) -> None:
        """With prefixes, a thousand distinct keys add no series: every series exists from the
        start, one per outcome and listed prefix (and _other)."""
        registry = CollectorRegistry()
        metrics = LockMetrics(registry, KeyPrefixes(["jobs:"]))
        before = series(registry)
        for n in range(1000):
            key = f"jobs:{n}" if n % 2 else f"k{n}"
            metrics.record([Granted(key, Grant.AFTER_WAIT), Ended(key, End.EXPIRED, n)])
            metrics.waited(key, Waited.TIMED_OUT, 0.01)
            metrics.checked(key, live=False)
        assert series(registry) == before
        prefixes = {labels["key_prefix"] for _, labels in before if "key_prefix" in labels}
        assert prefixes == {"jobs:", OTHER_KEYS}

    def test_an_expiry_is_counted_and_its_hold_observed(self) -> None:
        """An expired lease adds to the expiries and to the hold histogram (outcome expired),
        in seconds."""
        registry = CollectorRegistry()
        LockMetrics(registry).record([Ended("k", End.EXPIRED, 2_000_000)])
        assert registry.get_sample_value("volcano_lock_expiries_total") == 1
        labels = {"outcome": "expired"}
        assert registry.get_sample_value("volcano_lock_hold_seconds_sum", labels) == 2.0
        assert registry.get_sample_value("volcano_lock_hold_seconds_count", labels) == 1


class TestWaitOutcome:
    @pytest.mark.parametrize(
        ("phase", "answer", "outcome"),
        [
            (Phase.GRANTED, Answer(200, b"{}"), Waited.GRANTED),
            (Phase.GRANTED, None, Waited.UNDELIVERED),
            (Phase.LEAVING, Answer(409, b"{}"), Waited.TIMED_OUT),
            (Phase.LEAVING, None, Waited.CLIENT_LEFT),
            (Phase.LEAVING, Answer(503, b"{}"), Waited.SHUTDOWN),
            (Phase.SUPERSEDED, Answer(409, b"{}"), Waited.SUPERSEDED),
            (Phase.REVOKED, Answer(401, b"{}"), Waited.REVOKED),
            (Phase.REVOKED, None, Waited.REVOKED),
            (Phase.QUEUED, None, Waited.ERROR),
        ],
    )
    def test_each_end_of_a_wait(self, phase: Phase, answer: Answer | None, outcome: Waited) -> None:
        """A waiting request's phase and answer say how its wait ended."""
        assert wait_outcome(phase, answer) is outcome


class TestSettings:
    @pytest.mark.parametrize("prefix", ["", "_x", "-x", "a b", "a/b", "k" * 256])
    def test_a_prefix_must_start_a_possible_key(self, prefix: str) -> None:
        """A prefix no key could start with is refused, naming it."""
        with pytest.raises(ValueError, match="metric key prefix"):
            ServerConfig(metric_key_prefixes=(prefix,))

    def test_at_most_32_prefixes(self) -> None:
        """The allow-list is bounded, so the series are."""
        ServerConfig(metric_key_prefixes=tuple(f"p{n}" for n in range(32)))
        with pytest.raises(ValueError, match="at most 32"):
            ServerConfig(metric_key_prefixes=tuple(f"p{n}" for n in range(33)))
