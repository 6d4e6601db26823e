"""Leader failover: `kill -9` of the leader until the next candidate's campaign returns.

Volcano's `client.elections.campaign` (the reference server on SQLite, and on PostgreSQL when it
is reachable) beside etcd's election (Debian's etcd-server, its v3 JSON gateway over httpx: a
lease kept alive every ttl/3, `/v3/election/campaign`) and kazoo's `Election` (a local
ZooKeeper), all from bench/_peers.py, with the same ttl: ZooKeeper's least session timeout
with the peers' tickTime (2 x 2 s), so 4 s for every system.

Each trial: a leader process campaigns and keeps its lease alive; a candidate process campaigns
behind it; once the candidate is known to be in line (read from the system itself), the leader
gets SIGKILL. The failover time runs from the kill to the moment the candidate's campaign
returned, both read on CLOCK_MONOTONIC, which every process of the machine shares. A killed
leader's lease has between two thirds of the ttl and the whole ttl left (every client renews
at a third), so the failover is at least that; for Volcano and etcd the lease's time left at
the kill is read too, and "beyond the lease" is what the hand-over took past it.

    python -m bench._failover [--rounds 5] [--ttl 4]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from . import _peers
from ._servers import deployment, postgres_available

TTL = 4.0
"""Seconds: ZooKeeper's least session timeout at the peers' tickTime of 2 s."""
NAME = "bench-election"


# -- the children: one campaigning process each --------------------------------------------


def _volcano_child(role: str, ttl: float) -> None:
    import volcano

    with volcano.Client() as client, client.elections.campaign(NAME, label=role, ttl=ttl):
        _leading(role)


def _etcd_child(role: str, ttl: float, address: str) -> None:
    import httpx

    # No timeout: a campaign waits as long as the leader lives.
    with httpx.Client(base_url=f"http://{address}", timeout=None) as http:  # noqa: S113
        lease = http.post("/v3/lease/grant", json={"TTL": round(ttl)}).json()["ID"]

        def keep_alive() -> None:  # what etcd's own client does: a keepalive every ttl/3
            while True:
                time.sleep(ttl / 3)
                http.post("/v3/lease/keepalive", json={"ID": lease})

        threading.Thread(target=keep_alive, daemon=True).start()
        body = {"name": _b64(NAME), "lease": lease, "value": _b64(role)}
        http.post("/v3/election/campaign", json=body).raise_for_status()
        _leading(role)


def _kazoo_child(role: str, ttl: float, address: str) -> None:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=address, timeout=ttl)
    client.start()
    client.Election(f"/{NAME}", role).run(_leading, role)


def _leading(role: str) -> None:
    print(f"leading {time.monotonic()!r}", flush=True)
    if role == "leader":
        while True:
            time.sleep(3600)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


CHILDREN: dict[str, Callable[..., None]] = {
    "volcano": _volcano_child,
    "etcd": _etcd_child,
    "kazoo": _kazoo_child,
}


# -- the parent: one trial of one system ---------------------------------------------------


class _System:
    """How to start a system's campaigners, and to tell whether a candidate is in line."""

    def __init__(self, name: str, kind: str, *, env: dict[str, str], address: str = "") -> None:
        self.name = name
        self.kind = kind
        self.env = env
        self.address = address

    def start(self, role: str, ttl: float) -> subprocess.Popen[str]:
        args = [sys.executable, "-m", "bench._failover", "child", self.kind, role, str(ttl)]
        if self.address:
            args.append(self.address)
        return subprocess.Popen(args, env=self.env, stdout=subprocess.PIPE, text=True)

    def in_line(self) -> bool:
        """Whether a second campaigner waits behind the leader."""
        import httpx

        if self.kind == "volcano":
            url = self.env["VOLCANO_API_URL"]
            headers = {
                "apikey": self.env["VOLCANO_ANON_KEY"],
                "Authorization": f"Bearer {self.env['VOLCANO_SERVICE_KEY']}",
            }
            state = httpx.get(f"{url}/v1/locks/{NAME}", headers=headers).json()
            return int(state["waiters"]) == 1
        if self.kind == "etcd":
            body = {"key": _b64(f"{NAME}/"), "range_end": _b64(f"{NAME}0"), "count_only": True}
            found = httpx.post(f"http://{self.address}/v3/kv/range", json=body).json()
            return int(found.get("count", 0)) == 2
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.address)
        client.start()
        try:
            return len(client.get_children(f"/{NAME}")) == 2
        finally:
            client.stop()
            client.close()

    def lease_left(self) -> float | None:
        """Seconds the leader's lease has left now, when the system says (None: it does not)."""
        import httpx

        if self.kind == "volcano":
            url = self.env["VOLCANO_API_URL"]
            headers = {
                "apikey": self.env["VOLCANO_ANON_KEY"],
                "Authorization": f"Bearer {self.env['VOLCANO_SERVICE_KEY']}",
            }
            state = httpx.get(f"{url}/v1/locks/{NAME}", headers=headers).json()
            expires = datetime.fromisoformat(state["expires_at"]).timestamp()
            return expires - time.time()  # the server's clock is this machine's
        if self.kind == "etcd":
            body = {"key": _b64(f"{NAME}/"), "range_end": _b64(f"{NAME}0")}
            keys = httpx.post(f"http://{self.address}/v3/kv/range", json=body).json()["kvs"]
            first = min(keys, key=lambda kv: int(kv["create_revision"]))
            alive = httpx.post(
                f"http://{self.address}/v3/lease/timetolive", json={"ID": first["lease"]}
            ).json()
            return float(alive["TTL"])  # whole seconds: etcd rounds
        return None


def _trial(system: _System, ttl: float) -> dict[str, float | None]:
    """One failover of `system`: its seconds, and the leader's lease left at the kill."""
    leader = system.start("leader", ttl)
    candidate: subprocess.Popen[str] | None = None
    try:
        _read_leading(leader)
        candidate = system.start("candidate", ttl)
        deadline = time.monotonic() + 30
        while not system.in_line():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{system.name}: the candidate never got in line")
            time.sleep(0.02)
        time.sleep(random.uniform(0, ttl / 3))  # any moment of the renewal cycle
        left = system.lease_left()
        killed = time.monotonic()
        os.kill(leader.pid, signal.SIGKILL)
        elected = _read_leading(candidate)
        return {"failover": elected - killed, "lease_left": left}
    finally:
        for process in (leader, candidate):
            if process is not None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait(10)
                if process.stdout is not None:
                    process.stdout.close()


def _read_leading(process: subprocess.Popen[str]) -> float:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("leading "):
        raise RuntimeError(f"a campaigner ended without leading (status {process.wait(10)})")
    return float(line.split()[1])


@contextlib.contextmanager
def _systems(postgres: bool) -> Iterator[list[_System]]:
    _peers.install("zookeeper", "etcd", "kazoo")
    with contextlib.ExitStack() as stack:
        zookeeper = stack.enter_context(_peers.zookeeper())
        etcd = stack.enter_context(_peers.etcd())
        base = {k: v for k, v in os.environ.items() if not k.startswith("VOLCANO_")}
        systems = []
        for backend in ["sqlite", "postgres"] if postgres else ["sqlite"]:
            target = stack.enter_context(deployment(backend, 1))
            env = {
                **base,
                "VOLCANO_API_URL": target.urls[0],
                "VOLCANO_ANON_KEY": target.keys.anon,
                "VOLCANO_SERVICE_KEY": target.keys.service,
            }
            systems.append(_System(f"volcano ({backend})", "volcano", env=env))
        systems.append(
            _System(f"etcd {etcd.version} election", "etcd", env=base, address=etcd.address)
        )
        systems.append(
            _System(
                f"kazoo Election (zookeeper {zookeeper.version})",
                "kazoo",
                env=base,
                address=zookeeper.address,
            )
        )
        yield systems


def failover_rounds(
    *, rounds: int, ttl: float = TTL, postgres: bool | None = None
) -> dict[str, Any]:
    """`rounds` rounds, each system once per round in a shuffled order."""
    use_postgres = postgres_available() if postgres is None else postgres
    found: dict[str, list[dict[str, float | None]]] = {}
    with _systems(use_postgres) as systems:
        for number in range(1, rounds + 1):
            print(f"... failover round {number}/{rounds} (ttl {ttl:g} s)", flush=True)
            random.shuffle(systems)
            for system in systems:
                found.setdefault(system.name, []).append(_trial(system, ttl))
    return {
        "ttl": ttl,
        "rounds": rounds,
        "systems": {n: _summary(t, ttl) for n, t in found.items()},
    }


def _summary(trials: list[dict[str, float | None]], ttl: float) -> dict[str, Any]:
    times = [t["failover"] or 0.0 for t in trials]
    summary: dict[str, Any] = {
        "failover_median": statistics.median(times),
        "failover_min": min(times),
        "failover_max": max(times),
        "median_over_ttl": statistics.median(times) / ttl,
        "trials": trials,
    }
    beyond = [
        t["failover"] - t["lease_left"]
        for t in trials
        if t["lease_left"] is not None and t["failover"] is not None
    ]
    if beyond:
        summary["beyond_lease_median"] = statistics.median(beyond)
        summary["beyond_lease_max"] = max(beyond)
    return summary


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "child":
        kind, role, ttl, *rest = args[1:]
        CHILDREN[kind](role, float(ttl), *rest)
        return
    parser = argparse.ArgumentParser(prog="python -m bench._failover")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ttl", type=float, default=TTL)
    options = parser.parse_args(args)
    started = time.time()
    result = failover_rounds(rounds=options.rounds, ttl=options.ttl)
    result["load_average"] = os.getloadavg()
    result["seconds"] = time.time() - started
    print(json.dumps(result, indent=2))
    print_failover(result)


def print_failover(result: dict[str, Any]) -> None:
    """The failover table: each system's seconds from kill -9 to the next leader."""
    print(f"\nfailover, ttl {result['ttl']:g} s, {result['rounds']} rounds (seconds from kill -9):")
    for name, figures in sorted(result["systems"].items()):
        beyond = figures.get("beyond_lease_median")
        extra = (
            ""
            if beyond is None
            else f"; beyond the lease: {beyond:.3f} (max {figures['beyond_lease_max']:.3f})"
        )
        print(
            f"  {name:45} {figures['failover_median']:.3f} [{figures['failover_min']:.3f},"
            f" {figures['failover_max']:.3f}] = {figures['median_over_ttl']:.2f} ttl{extra}"
        )


if __name__ == "__main__":
    main()
