"""Background work as state machines: ArchiveBox's "States & Lifecycles" model on asyncio.

Every unit of background work is an *object*: a row with a ``status`` and a
``retry_at`` that is both its schedule and its lease. *Actors* (asyncio
tasks) claim due objects by compare-and-swap and *tick* them: read, decide,
make one *transition* (one compare-and-swap write, then side effects that
only make other objects due). One *orchestrator* per process starts actors
for the queues that have due objects. Objects stay as history in their
final states; a crashed actor's lease expires and the object is claimed
again, so every tick is idempotent.

Modules, one concept each:

- :mod:`~gateway.jobs.model`         ``ObjectType``: states and transitions, declared as data
- :mod:`~gateway.jobs.columns`       an object type's own columns, a frozen dataclass; its SQL
- :mod:`~gateway.jobs.schema`        the tables (``create_schema``) and ``connect``
- :mod:`~gateway.jobs.db`            ``JobObject``, ``read_*`` and ``write_*`` functions, times
- :mod:`~gateway.jobs.jobs_db`       ``JobsDB``: the jobs database on a ``SqliteThread``
- :mod:`~gateway.jobs.sqlite_thread` ``SqliteThread``: one SQLite handle on one thread
  (the store's copy-status index uses it too)
- :mod:`~gateway.jobs.actors`        ``ActorType``: claims, ticks, time limits, backoff
- :mod:`~gateway.jobs.orchestrator`  ``Orchestrator``: spawns actors, orphans, idle; ``HostLock``
- :mod:`~gateway.jobs.hooks`         pluggy hookspecs and plugin loading
- :mod:`~gateway.store.actor_types`      ``ACTOR_TYPES``: the built-in actor types
- :mod:`~gateway.server.jobs_service`       ``JobsService``: the jobs of one process (serve, worker)
- :mod:`~gateway.jobs.report`        ``gateway jobs`` and ``GET /_jobs``
- :mod:`~gateway.jobs.settings`      ``JobsSettings`` (the ``jobs:`` section)
- :mod:`~gateway.commands.jobs`           ``gateway worker`` and ``gateway jobs``

How to add an object type and its actor type: ``docs/background-work.md``,
"Adding a type of background work".
"""
