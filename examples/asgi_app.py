"""A Starlette app whose background jobs run on one instance only: the elected leader.

With the VOLCANO_* variables set (see walkthrough.py) and `pip install "volcano[apscheduler]"
starlette uvicorn`, from this directory, in two terminals:

    uvicorn asgi_app:app --port 8001
    uvicorn asgi_app:app --port 8002

One instance leads: it runs `watch_queue` (a coroutine) and the APScheduler job
`send_digests` every 5 seconds; `curl localhost:8001/` says which one. Stop it (Ctrl-C: it
resigns, and the other takes over at once) or kill it with kill -9 (the other takes over once
its lease has run out, within the ttl: 10 s). FastAPI takes the same lifespan:
`FastAPI(lifespan=lifespan)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import volcano
from volcano.integrations.asgi import scheduler_while_leader, while_leader


async def watch_queue(leadership: volcano.AsyncLeadership) -> None:
    """A job that runs as long as this instance leads (it is cancelled when it stops)."""
    while True:
        print(f"[{os.getpid()}] watching the queue in term {leadership.term}", flush=True)
        await asyncio.sleep(5)


def send_digests() -> None:
    print(f"[{os.getpid()}] digests sent", flush=True)


scheduler = AsyncIOScheduler()
scheduler.add_job(send_digests, "interval", seconds=5)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with (
        volcano.AsyncClient() as client,
        while_leader("queue-watcher", watch_queue, client=client, ttl=10) as watcher,
        scheduler_while_leader("digests", scheduler, client=client, ttl=10) as digests,
    ):
        app.state.leaders = {"queue-watcher": watcher, "digests": digests}
        yield


async def status(request: Request) -> JSONResponse:
    leaders = request.app.state.leaders
    return JSONResponse({name: leader.leading for name, leader in leaders.items()})


app = Starlette(routes=[Route("/", status)], lifespan=lifespan)
