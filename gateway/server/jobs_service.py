"""JobsService: the background work of one process (``gateway serve`` or ``gateway worker``).

It gathers the actor types (the built-in ones and the plugins'), declares
their hooks, opens the store shared (``store.lock``: ``store repair`` waits
for it to stop; the index's schema migrated), opens the jobs database (the
store's ``index.sqlite3``) and runs one
:class:`~gateway.jobs.orchestrator.Orchestrator` until stopped.

In ``gateway serve`` (``host_lock=True``) the orchestrator runs only while
this process holds ``<store>/jobs.lock``: several serving processes on one
host run one orchestrator between them, and a standby takes over within
``10 * poll_s`` when the holder exits. ``gateway worker`` runs its own
whatever the lock says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gateway.errors import ConfigError
from gateway.jobs.actors import ActorType, JobContext, object_types_of
from gateway.jobs.db import utcnow
from gateway.jobs.hooks import Hooks, load_plugins
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.orchestrator import HostLock, Orchestrator
from gateway.jobs.report import JobsCollector, read_report
from gateway.jobs.schema import connect
from gateway.jobs.settings import JobsSettings
from gateway.store import actor_types
from gateway.store.layout import Layout
from gateway.store.settings import StoreSettings
from gateway.store.store_actor import StoreContext

if TYPE_CHECKING:
    from gateway.config import GatewayConfig
    from gateway.store.store import Store

__all__ = ["JobsService", "Role"]

logger = logging.getLogger(__name__)

#: Who runs the orchestrator (written into ``lease_owner``).
Role = Literal["serve", "worker", "store-add"]


class JobsService:
    """See the module docstring. Raises :class:`ValueError` when plugins do not fit."""

    def __init__(
        self,
        settings: JobsSettings,
        store: StoreSettings,
        *,
        role: Role,
        plugins: Sequence[object] = (),
        host_lock: bool = False,
        enabled: bool = True,
    ) -> None:
        self.settings = settings
        self.store_settings = store
        # Paths only: Store.open (in start) checks the root, and says when an
        # older release's store is at the old default root.
        self.layout = Layout(store.root_path)
        self.role = role
        self.enabled = enabled
        # The store's actor types come through the hook like any plugin's, first.
        self.hooks = Hooks([actor_types, *plugins])
        self.actor_types: list[type[ActorType]] = self.hooks.actor_types()
        self.object_types = object_types_of(self.actor_types)
        self.hooks.add_object_types(self.object_types)
        self.hooks.check()
        self.orchestrator: Orchestrator | None = None
        self._lock = HostLock(self.layout.root / "jobs.lock") if host_lock else None
        self._db: JobsDB | None = None
        self._store: Store | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @classmethod
    def from_config(cls, config: GatewayConfig, *, role: Role) -> JobsService:
        """The service for ``config``; :class:`ConfigError` (at ``jobs.plugins``) on bad plugins.

        ``enabled`` follows ``jobs.enabled``, by default whether the app
        opens the store; ``gateway worker`` runs whatever it says.
        """
        settings = config.jobs
        plugins = load_plugins(settings.plugins)
        enabled = settings.enabled if settings.enabled is not None else config.uses_store
        try:
            return cls(
                settings,
                config.store,
                role=role,
                plugins=plugins,
                host_lock=role == "serve",
                enabled=enabled or role != "serve",
            )
        except (ValueError, TypeError) as exc:
            raise ConfigError("jobs.plugins", str(exc)) from exc

    @property
    def db_path(self) -> Path:
        return self.layout.db_path

    @property
    def owner(self) -> str:
        return f"{self.role} {os.getpid()}"

    # ---------------------------------------------------------------- running
    async def start(self) -> None:
        """Open the store (shared) and the database, start the orchestrator task (when enabled).

        Raises :class:`~gateway.store.errors.StoreError` when the store cannot
        be opened (``store repair`` runs, the index is newer than this release).
        """
        if not self.enabled or self._task is not None:
            return
        from gateway.store.store import Store

        self._store = await Store.open(self.store_settings, mode="shared")
        self._db = JobsDB(self.db_path, self.object_types)
        try:
            await self._db.open()
        except BaseException:
            await self.stop()
            raise
        ctx = JobContext(
            db=self._db,
            hooks=self.hooks,
            settings=self.settings,
            owner=self.owner,
            app=StoreContext(root=self.layout.root, settings=self.store_settings),
        )
        self.orchestrator = Orchestrator(ctx, self.actor_types)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="jobs-orchestrator")

    async def _run(self) -> None:
        assert self.orchestrator is not None
        if self._lock is not None:
            announced = False
            while not self._lock.try_acquire():
                if not announced:
                    logger.info(
                        "jobs: another process (pid %s) runs the orchestrator of %s on this"
                        " host; this one stands by",
                        self._lock.holder() or "?",
                        self.layout.root,
                    )
                    announced = True
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), 10 * self.settings.poll_s)
                if self._stopping.is_set():
                    return
        logger.info(
            "jobs: orchestrator running on %s (%s)",
            self.layout.root,
            ", ".join(t.name for t in self.actor_types) or "no actor types",
        )
        try:
            await self.orchestrator.run()
        finally:
            if self._lock is not None:
                self._lock.release()

    @property
    def active(self) -> bool:
        """True while this process runs its orchestrator (not standing by)."""
        return (
            self._task is not None
            and not self._task.done()
            and (self._lock is None or self._lock.held)
        )

    async def wait(self) -> None:
        """Wait until the orchestrator task ends (after :meth:`stop`); raise what it raised."""
        if self._task is not None:
            await self._task

    def request_stop(self) -> None:
        """Stop claiming (a signal handler may call this); :meth:`wait` returns when done."""
        self._stopping.set()
        if self.orchestrator is not None:
            self.orchestrator.stop()

    async def stop(self) -> None:
        """Stop claiming, let the ticks in hand finish, close the database."""
        self.request_stop()
        try:
            if self._task is not None:
                await asyncio.gather(self._task, return_exceptions=True)
            if self._store is not None and self._store.settings.storages:
                from gateway.store.replication.director import release_own_claims

                await release_own_claims(self._store.replicas, "its process stopped")
        finally:
            self._task = None
            if self._db is not None:
                db, self._db = self._db, None
                await db.close()
            if self._store is not None:
                store, self._store = self._store, None
                await store.close()

    # -------------------------------------------------------------- reporting
    async def report(self) -> dict[str, Any]:
        """:func:`~gateway.jobs.report.read_report` plus this process's orchestrator."""
        body = await asyncio.to_thread(self.read_report)
        orchestrator = self.orchestrator
        body["orchestrator"] = {
            "enabled": self.enabled,
            "role": self.role,
            "pid": os.getpid(),
            "active": self.active,
            "running": orchestrator.running_count() if orchestrator else {},
            "queues": dict(orchestrator.queues) if orchestrator else {},
        }
        return body

    def collector(self) -> JobsCollector:
        """The ``/metrics`` families of the jobs (:class:`~gateway.jobs.report.JobsCollector`)."""
        return JobsCollector(self.read_report)

    def read_report(self) -> dict[str, Any]:
        """The database's report (blocking); empty types when there is no database yet."""
        if not self.db_path.exists():
            return read_report_empty(self.object_types)
        conn = connect(self.db_path, read_only=True)
        try:
            return read_report(conn, self.object_types, utcnow())
        finally:
            conn.close()


def read_report_empty(object_types: Sequence[Any]) -> dict[str, Any]:
    """The report of a store that has no database yet."""
    import sqlite3

    conn = sqlite3.connect(":memory:")
    try:
        return read_report(conn, object_types, utcnow())
    finally:
        conn.close()
