"""Sustained acquire/release load with request ids.

    python -m bench._load URL ANON SERVICE SECONDS CLIENTS


Prints the number of requests sent.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid

import httpx


def main() -> None:
    url, anon, service, seconds, clients = (
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        float(sys.argv[4]),
        int(sys.argv[5]),
    )
    headers = {"apikey": anon, "Authorization": f"Bearer {service}"}
    deadline = time.monotonic() + seconds
    counts = [0] * clients

    def run(n: int) -> None:
        key = f"load-{n}"
        with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
            while time.monotonic() < deadline:
                owner = str(uuid.uuid4())
                lease = http.post(
                    f"/v1/locks/{key}/acquire",
                    json={"owner_token": owner, "ttl_seconds": 30},
                    headers={"X-Request-Id": str(uuid.uuid4())},
                ).json()
                http.post(
                    f"/v1/locks/{key}/release",
                    json={"owner_token": owner, "fencing_token": lease["fencing_token"]},
                    headers={"X-Request-Id": str(uuid.uuid4())},
                )
                counts[n] += 2

    threads = [threading.Thread(target=run, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(sum(counts))


if __name__ == "__main__":
    main()
