"""What issue 25's instruments cost, before and after, in one run.

    python -m bench._observe --baseline DIR [--backend sqlite|postgres] [--rounds 7] [--seconds 2]
    python -m bench._observe --sdk [--rounds 7] [--seconds 2]

The server (with --baseline):

DIR is a checkout of the code before the lock metrics (`git worktree add --detach DIR <commit>`);
its `volcano_server` runs from that directory with this interpreter. Three servers, each on a
fresh database of its own, take the same raw acquire+release cycles (`bench._cycles`, one
client process) once per round, in a shuffled order:

- `before`: DIR's server;
- `after`: this checkout's, lock metrics counted, tracing off (no OTEL_* variables);
- `traced`: this checkout's with OTEL_TRACES_EXPORTER=console (every span serialised and
  written, to /dev/null): what turning tracing on costs, for reference.

Reported: the server process's CPU per cycle (user+system over the timed window), and the
ratios after/before and traced/after taken within each round. Writes bench/results/observe.json.

The SDK (with --sdk): acquire+release cycles of `volcano.Client` and `volcano.AsyncClient`
against one server, and (`-local`) against canned answers in the worker itself, where only the
SDK's own work is timed; each variant in a fresh worker process, once per round, shuffled:

- `absent`: OpenTelemetry cannot be imported in the worker (as if not installed);
- `off`: its API imported, no tracer provider configured (the SDK looks and finds none);
- `on`: a provider configured, every span made and handed to a processor that drops it.

Reported: the worker's CPU per cycle (its process time over the timed window) and cycles/s,
and the ratios off/absent and on/off within each round. Writes bench/results/observe-sdk.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import random
import statistics
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from tests.support.server import ServerProcess

from ._postgres import Server, checkout_keys, timed
from ._servers import Deployment, fresh_database

SIDES = ("before", "after", "traced")
TRACING = ("absent", "off", "on")
SDK_KINDS = ("sync", "async", "sync-local", "async-local")


@contextlib.contextmanager
def server(side: str, checkout: Path | None, backend: str) -> Iterator[Server]:
    """A server of `checkout` (this one when None) on a fresh database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if side == "traced":
        env["OTEL_TRACES_EXPORTER"] = "console"
    with fresh_database(backend) as url:
        keys = checkout_keys(url, checkout)
        process = ServerProcess(url, "--no-access-log", cwd=checkout, env=env)
        process.env = env  # only these variables, none of this process's OTEL_*
        process.start()
        try:
            yield Server(side, Deployment(side, url, (process.url,), keys), process)
        finally:
            process.terminate()


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _canned(request: Any) -> Any:
    """The server's answers without a server: a lease for an acquire, 204 for a release."""
    import httpx

    headers = {"X-Request-Id": request.headers["X-Request-Id"]}
    if request.url.path.endswith("/release"):
        return httpx.Response(204, headers=headers)
    body = json.loads(request.content)
    lease = {
        "key": request.url.path.split("/")[3],
        "owner_token": body["owner_token"],
        "fencing_token": 1,
        "expires_at": "2030-01-01T00:00:00.000000Z",
        "ttl_seconds": body["ttl_seconds"],
    }
    return httpx.Response(200, json=lease, headers=headers)


def sdk_worker(
    kind: str, tracing: str, url: str, anon: str, service: str, seconds: float
) -> tuple[float, float]:
    """(cycles/s, CPU seconds per cycle) of one client in this worker process.

    `kind`: sync or async, `-local` for canned answers in the process instead of a server
    (only the SDK's own work is then measured).
    """
    import asyncio
    import sys

    import httpx

    if tracing == "absent":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment] - import fails, as if absent
    elif tracing == "off":
        import opentelemetry.trace  # noqa: F401 - imported, never configured
    else:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

        provider = TracerProvider()
        provider.add_span_processor(SpanProcessor())  # makes every span, keeps none
        trace.set_tracer_provider(provider)
    import volcano

    key = f"observe-{kind}-{tracing}-{os.getpid()}"
    local = kind.endswith("-local")
    options = {"anon_key": anon, "service_key": service, "api_url": url}

    def timed(cycle: Any) -> tuple[float, float]:
        for _ in range(50):
            cycle()
        count, started, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - started < seconds:
            cycle()
            count += 1
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        return count / elapsed, cpu / count

    if kind.startswith("sync"):
        http = httpx.Client(transport=httpx.MockTransport(_canned) if local else None)
        with http, volcano.Client(**options, http_client=http) as client:
            return timed(lambda: client.locks.release(key, client.locks.acquire(key, ttl=30)))

    async def run() -> tuple[float, float]:
        async def canned(request: httpx.Request) -> httpx.Response:
            return _canned(request)  # type: ignore[no-any-return]

        http = httpx.AsyncClient(transport=httpx.MockTransport(canned) if local else None)
        async with http, volcano.AsyncClient(**options, http_client=http) as client:

            async def cycle() -> None:
                await client.locks.release(key, await client.locks.acquire(key, ttl=30))

            for _ in range(50):
                await cycle()
            count, started, cpu = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - started < seconds:
                await cycle()
                count += 1
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        return count / elapsed, cpu / count

    return asyncio.run(run())


def sdk_main(args: argparse.Namespace) -> None:
    """The SDK's cost of tracing off, beside OpenTelemetry absent, and on."""
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load": [os.getloadavg()],
    }
    variants = [(kind, tracing) for kind in SDK_KINDS for tracing in TRACING]
    cpu: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    rates: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    context = multiprocessing.get_context("spawn")
    with server("after", None, "sqlite") as target:
        keys = target.deployment.keys
        for _ in range(args.rounds):
            order = list(variants)
            random.shuffle(order)
            for kind, tracing in order:
                with ProcessPoolExecutor(1, mp_context=context) as pool:
                    rate, per_cycle = pool.submit(
                        sdk_worker, kind, tracing, target.process.url, keys.anon, keys.service,
                        args.seconds,
                    ).result()  # fmt: skip
                rates[kind, tracing].append(rate)
                cpu[kind, tracing].append(per_cycle * 1000)
    results["load"].append(os.getloadavg())
    print("SDK CPU per acquire+release cycle (the client's process time), ms:")
    for kind in SDK_KINDS:
        for tracing in TRACING:
            s = summary(cpu[kind, tracing])
            r = summary(rates[kind, tracing])["median"]
            results[f"{kind}_{tracing}"] = {
                "client_cpu_ms_per_cycle": s,
                "cycles_per_s": summary(rates[kind, tracing]),
            }
            print(
                f"  {kind:11} {tracing:6} {s['median']:.3f}"
                f" [{s['min']:.3f}, {s['max']:.3f}]  {r:.0f} cycles/s"
            )
        for upper, lower in (("off", "absent"), ("on", "off")):
            ratios = [a / b for a, b in zip(cpu[kind, upper], cpu[kind, lower], strict=True)]
            s = results[f"{kind}_cpu_{upper}_vs_{lower}"] = summary(ratios)
            print(
                f"  {kind:11} {upper}/{lower}: {s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"
            )
    print(f"  load average before/after: {results['load'][0][0]:.2f} / {results['load'][1][0]:.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "observe-sdk.json").write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._observe", description=__doc__)
    parser.add_argument("--baseline", type=Path, help="the checkout before (the server's cost)")
    parser.add_argument("--sdk", action="store_true", help="the SDK's cost instead")
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--untraced",
        action="store_true",
        help="leave the traced server out (less time, less noise)",
    )
    args = parser.parse_args()
    if args.sdk:
        sdk_main(args)
        return
    if args.baseline is None:
        parser.error("give --baseline DIR (the server's cost) or --sdk")
    checkouts: dict[str, Path | None] = {
        "before": args.baseline.resolve(),
        "after": None,
        "traced": None,
    }
    sides = SIDES[:2] if args.untraced else SIDES
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "backend": args.backend,
        "load": [os.getloadavg()],
    }
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    rates: dict[str, list[float]] = {side: [] for side in sides}
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        with contextlib.ExitStack() as stack:
            servers = {
                side: stack.enter_context(server(side, checkouts[side], args.backend))
                for side in sides
            }
            for _ in range(args.rounds):
                order = list(sides)
                random.shuffle(order)
                for side in order:
                    rate, per_cycle = timed(pool, servers[side], "raw_httpx", 1, args.seconds)
                    rates[side].append(rate)
                    cpu[side].append(per_cycle * 1000)
    finally:
        pool.shutdown()
    results["load"].append(os.getloadavg())
    for side in sides:
        results[side] = {
            "cycles_per_s": summary(rates[side]),
            "server_cpu_ms_per_cycle": summary(cpu[side]),
        }
    pairs = (("after", "before"), ("traced", "after"))[: len(sides) - 1]
    for upper, lower in pairs:
        ratios = [a / b for a, b in zip(cpu[upper], cpu[lower], strict=True)]
        results[f"cpu_{upper}_vs_{lower}"] = summary(ratios)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"observe-{args.backend}.json").write_text(json.dumps(results, indent=2))
    print(f"server CPU per acquire+release cycle ({args.backend}, 1 client process), ms:")
    for side in sides:
        s = results[side]["server_cpu_ms_per_cycle"]
        rate = results[side]["cycles_per_s"]["median"]
        print(f"  {side:7} {s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]  {rate:.0f} cycles/s")
    for upper, lower in pairs:
        s = results[f"cpu_{upper}_vs_{lower}"]
        print(f"  {upper}/{lower}: {s['median']:.3f} [{s['min']:.3f}, {s['max']:.3f}]")
    print(f"  load average before/after: {results['load'][0][0]:.2f} / {results['load'][1][0]:.2f}")


if __name__ == "__main__":
    main()
