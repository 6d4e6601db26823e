"""Volcano in the frameworks Python teams already run: Celery, Django, ASGI apps and schedulers.

Each adapter is a module of its own, imported only by code that uses it (`import volcano`
never loads one), and uses only the SDK's public API:

- `volcano.integrations.celery` (`pip install "volcano[celery]"`): `LockedTask`, a task base
  class that holds a lease on a key built from the task's name and arguments while its body
  runs, and `ElectedScheduler`, a `celery beat` scheduler that dispatches only while it is
  the elected leader.
- `volcano.integrations.django` (`pip install "volcano[django]"`): a client configured from
  settings, `LockedCommandMixin` and `LockedCommand` for management commands run under a
  lock, and the `locked_migrate` command.
- `volcano.integrations.asgi` (no dependency; `pip install "volcano[apscheduler]"` for
  APScheduler): `while_leader` and `scheduler_while_leader`, async context managers for an
  app's lifespan that run a coroutine, or an APScheduler scheduler, only while this instance
  is the elected leader.
"""
