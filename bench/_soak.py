"""Legitimate load, alone and beside the attacks of issue 11, against one server process.

    python -m bench._soak [--seconds 60] [--clients 4] [--backend sqlite|postgres]

Runs the same legitimate load twice on one fresh server (default limits): once alone, once
while a separate attacker process keeps up, for the whole run, 200 slowloris connections (half
a head, a byte now and then, reopened when cut), ten 50 MB headers (resent when cut), silent
connections, bodies that never finish and log-forging paths. Prints, for each run, requests,
errors and the latency percentiles of the legitimate requests (acquire, release, get,
/healthz), and writes bench/results/soak.json. Everything stays on loopback and stops by
itself. Not part of CI: it takes two minutes and more.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from ._servers import deployment

UNFINISHED_BODY = b"POST /v1/locks/k/acquire HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
FORGED_PATH = b"GET /v1/locks/a%0Aforged%0D%1b[31m HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def legitimate_load(
    url: str, headers: dict[str, str], seconds: float, clients: int
) -> dict[str, Any]:
    """`clients` threads cycling acquire, get, release and /healthz; latencies and errors."""
    deadline = time.monotonic() + seconds
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def timed(
        http: httpx.Client, method: str, path: str, expect: int, **kw: Any
    ) -> httpx.Response | None:
        started = time.perf_counter()
        try:
            response = http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            with lock:
                errors.append(type(exc).__name__)
            return None
        took = time.perf_counter() - started
        with lock:
            latencies.append(took)
            if response.status_code != expect:
                errors.append(str(response.status_code))
        return response

    def run(n: int) -> None:
        key = f"soak-{n}-{uuid.uuid4().hex[:6]}"
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            while time.monotonic() < deadline:
                owner = str(uuid.uuid4())
                lease = timed(
                    http,
                    "POST",
                    f"/v1/locks/{key}/acquire",
                    200,
                    json={"owner_token": owner, "ttl_seconds": 30},
                )
                timed(http, "GET", f"/v1/locks/{key}", 200)
                if lease is not None and lease.status_code == 200:
                    body = {"owner_token": owner, "fencing_token": lease.json()["fencing_token"]}
                    timed(http, "POST", f"/v1/locks/{key}/release", 204, json=body)
                timed(http, "GET", "/healthz", 200)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return (
            1000 * ordered[min(len(ordered) - 1, int(p * len(ordered)))]
            if ordered
            else float("nan")
        )

    return {
        "requests": len(latencies),
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
        "p50_ms": round(pct(0.50), 2),
        "p99_ms": round(pct(0.99), 2),
        "max_ms": round(1000 * ordered[-1], 2) if ordered else None,
        "mean_ms": round(1000 * statistics.fmean(ordered), 2) if ordered else None,
    }


def attack(port: int, seconds: float, counts: Any) -> None:
    """The attacker process: every attack of the issue at once, until `seconds` pass."""
    deadline = time.monotonic() + seconds
    stop = threading.Event()

    def connect() -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=5)

    def slowloris(slot: int) -> None:
        while not stop.is_set():
            try:
                with connect() as sock:
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                    while not stop.wait(1.0):
                        sock.sendall(b"x-a: b\r\n")
            except OSError:
                counts[0] += 1  # cut by the server: reopen
                stop.wait(0.05)

    def huge_head(slot: int) -> None:
        chunk = b"a" * 65_536
        while not stop.is_set():
            try:
                with connect() as sock:
                    sock.sendall(b"GET /v1/locks/k HTTP/1.1\r\nHost: x\r\napikey: ")
                    for _ in range(800):  # 50 MB
                        if stop.is_set():
                            break
                        sock.sendall(chunk)
            except OSError:
                counts[1] += 1

    def silent_and_unfinished(slot: int) -> None:
        while not stop.is_set():
            try:
                with connect() as sock:
                    if slot % 2:
                        sock.sendall(UNFINISHED_BODY)
                    sock.recv(1024)  # until the server answers 408 or closes
            except OSError:
                pass
            counts[2] += 1

    def forged_paths(slot: int) -> None:
        while not stop.is_set():
            try:
                with connect() as sock:
                    sock.sendall(FORGED_PATH)
                    sock.recv(4096)
            except OSError:
                pass
            counts[3] += 1
            stop.wait(0.01)

    workers = [(slowloris, 200), (huge_head, 10), (silent_and_unfinished, 20), (forged_paths, 2)]
    threads = [
        threading.Thread(target=f, args=(i,), daemon=True) for f, n in workers for i in range(n)
    ]
    for thread in threads:
        thread.start()
    time.sleep(max(deadline - time.monotonic(), 0))
    stop.set()
    for thread in threads:
        thread.join(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench._soak")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    with deployment(args.backend, label="soak") as running:
        url = running.urls[0]
        port = int(url.rsplit(":", 1)[1])
        headers = running.keys.headers()
        quiet = legitimate_load(url, headers, args.seconds, args.clients)
        counts = multiprocessing.Array("l", 4)
        attacker = multiprocessing.Process(target=attack, args=(port, args.seconds + 5, counts))
        attacker.start()
        time.sleep(5)  # let the attacks reach their full strength first
        attacked = legitimate_load(url, headers, args.seconds, args.clients)
        attacker.join(timeout=60)
    results = {
        "seconds": args.seconds,
        "clients": args.clients,
        "backend": args.backend,
        "without_attacks": quiet,
        "with_attacks": attacked,
        "attacks": dict(
            zip(
                ("slowloris_cut", "huge_heads_cut", "silent_or_unfinished", "forged"),
                list(counts),
                strict=True,
            )
        ),
        "p99_ratio": round(attacked["p99_ms"] / quiet["p99_ms"], 2),
    }
    print(json.dumps(results, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
