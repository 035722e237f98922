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

Adding an actor type takes three things:

1. an object-type table: an :class:`~gateway.jobs.model.ObjectType` literal
   (states, initial, final, transitions, its own columns);
2. a module with its :class:`~gateway.jobs.actors.ActorType` subclass: the
   queue (``queue_states``), ``max_concurrent``, ``max_tick_s``, ``tick``
   and one ``transition_<type>_<from>_to_<to>`` method per transition it
   makes, each a single ``self.transition(...)`` call; objects are created
   by ordinary code with :func:`~gateway.jobs.db.write_object`;
3. one line in :data:`gateway.store.actor_types.ACTOR_TYPES` (or, outside this
   package, a plugin's ``get_actor_types`` hook).

Its table is created with the others (:func:`gateway.jobs.schema.create_schema`),
its hooks are declared, ``gateway jobs`` reports it, and the tests that walk
every declared transition and draw every diagram pick it up.
"""
