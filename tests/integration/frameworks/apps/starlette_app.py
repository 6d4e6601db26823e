"""The Starlette app the framework tests run under uvicorn, several instances at once: an
APScheduler job every 0.2 s that only the elected instance runs (scheduler_while_leader).

Each tick appends `tick <pid> <term>` to VOLCANO_TEST_LOG; `GET /status` says whether this
instance leads. The election's ttl is VOLCANO_TEST_TTL (default 3 s).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from volcano.integrations.asgi import WhileLeader, scheduler_while_leader

scheduler = AsyncIOScheduler()
leaders: list[WhileLeader] = []


async def tick() -> None:
    leadership = leaders[0].leadership
    term = leadership.term if leadership is not None else None
    with Path(os.environ["VOLCANO_TEST_LOG"]).open("a") as log:  # noqa: ASYNC230 - a line
        log.write(f"tick {os.getpid()} {term}\n")


scheduler.add_job(tick, "interval", seconds=0.2)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    ttl = float(os.environ.get("VOLCANO_TEST_TTL", "3"))
    async with scheduler_while_leader("scheduler", scheduler, ttl=ttl) as leader:
        leaders.append(leader)
        yield


async def status(request: Request) -> JSONResponse:
    return JSONResponse({"pid": os.getpid(), "leading": leaders[0].leading})


app = Starlette(routes=[Route("/status", status)], lifespan=lifespan)
