"""A Celery app whose tasks never run twice at once, and a beat that survives its machine.

With the VOLCANO_* variables set (`scripts/walkthrough.sh` prints how to start a local server;
`volcano-server keys create --project demo --output volcano.env` makes them), a Redis on
127.0.0.1:6379 (or CELERY_BROKER_URL), and `pip install "volcano[celery]" redis`, from this
directory:

    celery -A celery_app worker --loglevel INFO       # on as many machines as you like
    celery -A celery_app beat --loglevel INFO -S volcano.integrations.celery.ElectedScheduler
    python celery_app.py                              # sends the same task twice at once

Run the beat line in two terminals: one leads and sends `refresh_rates` every 10 seconds,
the other follows ("elected leader" shows who leads); stop the leader (Ctrl-C, or kill -9)
and the other takes over within `volcano_beat_ttl` (10 s). `python celery_app.py` sends
`send_invoices(42)` twice: one worker runs it, the other finds the key held and retries
when the lease ends (its Retry-After), then runs it with the next fencing token.
"""

from __future__ import annotations

import os
import time

from celery import Celery

from volcano.integrations.celery import LockedTask

app = Celery(
    "billing",
    broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"),
    backend=os.environ.get("CELERY_RESULT_BACKEND", "redis://127.0.0.1:6379/0"),
)
app.conf.update(
    # volcano_api_url, volcano_anon_key, volcano_service_key: the VOLCANO_* variables by default
    volcano_beat_election="billing-beat",
    volcano_beat_ttl=10,
    beat_schedule={"refresh-rates": {"task": "billing.refresh_rates", "schedule": 10.0}},
)


@app.task(
    name="billing.send_invoices",
    base=LockedTask,
    bind=True,
    lock_ttl=30,  # a worker killed with kill -9 holds the key at most this long
    lock_on_held="retry",  # Celery's retry, after the server's Retry-After
    max_retries=20,
)
def send_invoices(self: LockedTask, customer_id: int) -> int:
    """Send a customer's invoices: one run per customer at a time, fenced."""
    token = self.lock.lease.fencing_token
    for invoice in range(3):
        self.lock.check()  # raises volcano.LockLostError once ownership is lost
        print(f"customer {customer_id}: invoice {invoice} sent with fencing token {token}")
        time.sleep(1)
    return token


@app.task(name="billing.refresh_rates", base=LockedTask, bind=True, lock_ttl=30)
def refresh_rates(self: LockedTask) -> None:
    """What beat sends: a LockedTask too, so a failover's late duplicate skips."""
    print(f"rates refreshed with fencing token {self.lock.lease.fencing_token}")


if __name__ == "__main__":
    first, second = send_invoices.delay(42), send_invoices.delay(42)
    print("fencing tokens:", first.get(timeout=120), second.get(timeout=120))
