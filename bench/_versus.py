"""Server cost of two checkouts side by side: `python -m bench._versus BASE_CHECKOUT`.

Runs the SQLite server of this checkout and of `BASE_CHECKOUT` (its `volcano_server`, started
with that directory as the working directory) on fresh databases, `FULL` and `NORMAL`, and
measures `healthz` and `raw_httpx` cycles with 1 and 4 client processes, every variant of
every server once per round in a shuffled order. Prints the server cost (raw cycle time / two
`GET /healthz`) per round's median with min and max, and the raw cycle rates.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.support.server import ServerProcess

from ._measure import Summary, Workers
from ._servers import Deployment, make_keys


@contextlib.contextmanager
def _server(checkout: Path, label: str, synchronous: str) -> Iterator[Deployment]:
    with tempfile.TemporaryDirectory(prefix="volcano-versus-") as directory:
        url = f"sqlite:///{Path(directory) / 'bench.db'}"
        keys = make_keys(url)
        server = ServerProcess(
            url, "--no-access-log", "--sqlite-synchronous", synchronous, cwd=checkout
        )
        server.start()
        try:
            yield Deployment(label, url, (server.url,), keys)
        finally:
            server.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._versus")
    parser.add_argument("base", type=Path, help="the checkout to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--synchronous", nargs="+", default=["full", "normal"])
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    workers = Workers(4)
    try:
        with contextlib.ExitStack() as stack:
            servers = {
                (name, sync): stack.enter_context(_server(path, f"{name} {sync}", sync))
                for name, path in (("before", args.base.resolve()), ("after", here))
                for sync in args.synchronous
            }
            for processes in (1, 4):
                rates: dict[tuple[str, str, str], list[float]] = {}
                runs = [(s, v) for s in servers for v in ("healthz", "raw_httpx")]
                for _ in range(args.rounds):
                    random.shuffle(runs)
                    for server, variant in runs:
                        rate = workers.run(servers[server], variant, processes, args.seconds)
                        rates.setdefault((*server, variant), []).append(rate)
                print(f"{processes} client process(es), load {os.getloadavg()[0]:.2f}")
                for name, sync in servers:
                    health = rates[(name, sync, "healthz")]
                    raw = rates[(name, sync, "raw_httpx")]
                    cost = Summary.of([h / r for h, r in zip(health, raw, strict=True)])
                    print(
                        f"  {name:6} {sync:6} cost {cost.median:.2f} [{cost.low:.2f},"
                        f" {cost.high:.2f}]  raw {Summary.of(raw).median:6.0f}/s"
                        f"  healthz {Summary.of(health).median:6.0f}/s"
                    )
    finally:
        workers.close()


if __name__ == "__main__":
    main()
