"""Interleaved measurement: every variant once per round, in a shuffled order, many rounds.

The machine is shared and noisy, so figures are medians over rounds with min and max, and every
ratio is taken within a round (both sides measured back to back) before its median is taken.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import attrs

from ._cycles import Job, run_job, run_job_with_cpu
from ._servers import Deployment


@attrs.frozen
class Summary:
    """Median, min and max of samples."""

    median: float
    low: float
    high: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Sequence[float]) -> Summary:
        return cls(statistics.median(samples), min(samples), max(samples), tuple(samples))


class Workers:
    """A pool of client processes, started once (spawned: no state inherited).

    With `checkout`, its processes import that checkout's `volcano` (and generated client)
    instead of this one's: the SDK as it was, measured beside the SDK as it is.
    """

    def __init__(self, count: int, checkout: Path | None = None) -> None:
        self.count = count
        self._pool = ProcessPoolExecutor(
            count,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_first_on_path,
            initargs=(None if checkout is None else str(checkout.resolve()),),
        )

    def run(self, deployment: Deployment, variant: str, processes: int, seconds: float) -> float:
        """Total cycles per second of `processes` workers running `variant` together."""
        start_at = time.time() + 0.8  # after every worker has warmed up
        jobs = []
        for worker in range(processes):
            # With several servers, each worker starts on another one and alternates.
            urls = (
                deployment.urls[worker % len(deployment.urls) :]
                + deployment.urls[: worker % len(deployment.urls)]
            )
            jobs.append(
                Job(
                    variant,
                    urls,
                    deployment.keys.anon,
                    deployment.keys.service,
                    seconds,
                    worker,
                    start_at,
                )
            )
        return sum(self._pool.map(run_job, jobs))

    def client_cpu(
        self, deployment: Deployment, variant: str, seconds: float
    ) -> tuple[float, float]:
        """One process running `variant`: its cycles per second, and its CPU seconds (user +
        system) per cycle."""
        job = Job(
            variant,
            deployment.urls,
            deployment.keys.anon,
            deployment.keys.service,
            seconds,
            0,
            time.time() + 0.8,
        )
        rate, cpu = self._pool.submit(run_job_with_cpu, job).result()
        return rate, cpu

    def close(self) -> None:
        self._pool.shutdown()


def _first_on_path(checkout: str | None) -> None:
    if checkout is not None:
        sys.path[:0] = [checkout, os.path.join(checkout, "generated")]


def interleaved(
    workers: Workers,
    deployment: Deployment,
    variants: Sequence[str],
    processes: int,
    rounds: int,
    seconds: float,
) -> dict[str, list[float]]:
    """Rates of each variant, one sample per round, variants shuffled within each round."""
    rates: dict[str, list[float]] = {variant: [] for variant in variants}
    order = list(variants)
    for _ in range(rounds):
        random.shuffle(order)
        for variant in order:
            rates[variant].append(workers.run(deployment, variant, processes, seconds))
    return rates


def time_ratio(rates: dict[str, list[float]], slower: str, faster: str) -> Summary:
    """Per-round ratio of the time one `slower` cycle takes to one `faster` cycle."""
    return Summary.of(
        [fast / slow for slow, fast in zip(rates[slower], rates[faster], strict=True)]
    )
