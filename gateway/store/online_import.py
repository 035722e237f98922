"""Online import: WARC files handed to a store that may be serving (``gateway store add``).

``gateway store add FILE...`` writes one ``import`` object per file (its
absolute path, a batch id) into the store's database and, unless told not
to wait, runs an import actor over its own batch while it reports each
file's outcome; the actors of ``gateway serve`` and ``gateway worker`` take
the same objects (claims are compare-and-swap), so a command that is
stopped leaves its files to them. The steps are the store's own
(:mod:`gateway.store.importer`), run apart:

::

    queued --(verify_source: framing, warcio digests, SHA-256; reads only)--> verified
    verified --(stage: copy into incoming/, check the copy's SHA-256;
                publish: link into warcs/, index, close; one tick)--> imported
    verified --> present   the same bytes are in the store (under this or another name)
    queued, verified --> refused   not a file the gateway serves whole, a name another
                                   file has, the file changed since it was verified
    queued, verified --> failed    five failed ticks in a row (last_error)

The captures of an imported file are findable by every process as soon as
its rows commit, without a restart. Each tick is idempotent: a tick cut
short (killed, past its limit) is done again; an import whose copy was
staged when its importer died is finished or undone by the store
(:func:`~gateway.store.recovery.finish_or_undo_import`) before the next try,
so the file then ends ``imported`` or ``present``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gateway.jobs.actors import JobContext, WorkCancelled, in_thread
from gateway.jobs.db import JobObject, utcnow, write_objects
from gateway.jobs.hooks import Hooks
from gateway.jobs.jobs_db import JobsDB
from gateway.jobs.settings import JobsSettings
from gateway.store.db import IndexDB
from gateway.store.errors import ImportRejected, StoreError
from gateway.store.importer import (
    ImportResult,
    VerifiedSource,
    known_in_store,
    publish,
    stage,
    verify_source,
)
from gateway.store.job_rows import ImportColumns
from gateway.store.layout import Layout
from gateway.store.object_types import (
    IMPORT,
    IMPORT_QUEUED_TO_REFUSED,
    IMPORT_QUEUED_TO_VERIFIED,
    IMPORT_VERIFIED_TO_IMPORTED,
    IMPORT_VERIFIED_TO_PRESENT,
    IMPORT_VERIFIED_TO_REFUSED,
    OBJECT_TYPES,
)
from gateway.store.recovery import lock_staged
from gateway.store.settings import StoreSettings
from gateway.store.store_actor import StoreActorType, StoreContext
from gateway.store.verify import Progress

__all__ = [
    "IMPORT",
    "AddReport",
    "ImportActor",
    "add_files",
    "read_batch",
    "write_import_objects",
]


class ImportBusy(StoreError):
    """Another live process is importing a file of that name: try again later."""


# ------------------------------------------------------------------ reads/writes
def write_import_objects(
    conn: sqlite3.Connection, sources: Sequence[Path], batch: str
) -> list[int]:
    """Hand ``sources`` to the store: one queued object each, one transaction.

    The paths are stored as given: make them absolute first, since another
    process (a server in another directory) may be the one to import them.
    """
    rows = [ImportColumns(batch=batch, source_path=str(p), name=p.name) for p in sources]
    return write_objects(conn, IMPORT, utcnow(), rows)


def write_verified_import_objects(
    conn: sqlite3.Connection, sources: Sequence[VerifiedSource], batch: str
) -> list[int]:
    """Hand in files already verified (by ``store add`` itself): ``verified`` objects, due now."""
    rows = [_verified(ImportColumns(batch=batch, source_path=str(v.path)), v) for v in sources]
    return write_objects(conn, IMPORT, utcnow(), rows, status="verified")


def _verified(row: ImportColumns, source: VerifiedSource) -> ImportColumns:
    """``row`` with what verifying its file found."""
    return replace(
        row,
        name=source.name,
        size=source.size,
        sha256=source.sha256,
        date=source.date,
        records=source.records,
        notes=tuple(source.notes),
    )


def read_batch(conn: sqlite3.Connection, batch: str) -> list[JobObject[ImportColumns]]:
    """The import objects of ``batch``, in the order they were handed in."""
    rows = conn.execute(
        f"SELECT {', '.join(IMPORT.column_names)} FROM {IMPORT.table} WHERE batch = ? ORDER BY id",
        (batch,),
    ).fetchall()
    return [JobObject.from_row(IMPORT, row) for row in rows]


# ------------------------------------------------------------ the work of ticks
@dataclass(frozen=True, slots=True)
class Refused:
    """Why the file will not be imported, one problem per line."""

    reason: str


def _checker(cancel: Callable[[], bool], progress: Progress | None) -> Progress:
    def advance(n: int) -> None:
        if cancel():
            raise WorkCancelled("the import tick was cancelled")
        if progress is not None:
            progress(n)

    return advance


def verify(
    path: Path, cancel: Callable[[], bool], progress: Progress | None
) -> VerifiedSource | Refused:
    """The ``queued`` tick's work (blocking, reads only): :func:`verify_source`."""
    try:
        return verify_source(path, progress=_checker(cancel, progress))
    except ImportRejected as exc:
        return Refused("\n".join(exc.problems))


def stage_and_publish(
    layout: Layout, index: IndexDB, obj: JobObject[ImportColumns]
) -> ImportResult | Refused:
    """The ``verified`` tick's work (blocking): :func:`stage` then :func:`publish`.

    Raises :class:`ImportBusy` while another live process imports a file of
    the same name (its staging lock is held): the tick is retried later.
    """
    name = obj.row.name
    file = index.file_by_name(name)
    if file is not None and file.state == "importing":
        fd = lock_staged(layout.staging_path(name), create=False)
        if fd is None and layout.staging_path(name).exists():
            raise ImportBusy(f"{name} is being imported by another process; trying again later")
        if fd is not None:
            os.close(fd)  # a dead import: stage() finishes or undoes it
    source = VerifiedSource(
        path=Path(obj.row.source_path),
        name=name,
        size=obj.row.size,
        sha256=obj.row.sha256,
        date=obj.row.date or None,
        records=obj.row.records,
        notes=obj.row.notes,
    )
    try:
        staged = stage(layout, index, source)
        if isinstance(staged, ImportResult):
            return staged
        return publish(layout, index, staged)
    except ImportRejected as exc:
        if any("is being imported by another process" in p for p in exc.problems):
            raise ImportBusy(f"{name} is being imported by another process") from exc
        return Refused("\n".join(exc.problems))


# --------------------------------------------------------------------- the actor
class ImportActor(StoreActorType):
    """Ticks import objects: ``queued`` (verify), ``verified`` (copy in, index)."""

    name = "import"
    object_type = IMPORT
    queue_states = ("queued", "verified")
    max_concurrent = 1
    max_tick_s = 3600.0
    backoff_base_s = 2.0
    backoff_max_s = 600.0
    max_attempts = 5
    give_up_state = "failed"
    index_access = "write"

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return settings.import_max_concurrent, settings.import_max_tick_s

    async def tick(self, obj: JobObject[ImportColumns]) -> None:
        row = obj.row
        if obj.status == "queued":
            path = Path(row.source_path)
            checked = await in_thread(lambda cancel: verify(path, cancel.is_set, None))
            if isinstance(checked, Refused):
                values = replace(row, reason=checked.reason)
                await self.transition(obj, IMPORT_QUEUED_TO_REFUSED, retry_at=None, values=values)
            else:
                values = _verified(row, checked)
                await self.transition(
                    obj, IMPORT_QUEUED_TO_VERIFIED, retry_at=utcnow(), values=values
                )
            return
        done = await asyncio.to_thread(stage_and_publish, self.layout, self.index, obj)
        if isinstance(done, Refused):
            values = replace(row, reason=done.reason)
            await self.transition(obj, IMPORT_VERIFIED_TO_REFUSED, retry_at=None, values=values)
        elif done.already_present:
            values = replace(row, stored_as=done.name)
            await self.transition(obj, IMPORT_VERIFIED_TO_PRESENT, retry_at=None, values=values)
        else:
            values = replace(row, stored_as=done.name, captures=done.records)
            await self.transition(obj, IMPORT_VERIFIED_TO_IMPORTED, retry_at=None, values=values)


# ------------------------------------------------------------------ store add
#: A file ``store add`` settled before handing anything in: ``(path, status,
#: detail)``, status ``refused`` (detail: the reason) or ``present`` (detail:
#: the name the same bytes have in the store).
Settled = tuple[Path, str, str]


@dataclass(slots=True)
class AddReport:
    """The outcome of ``store add``: the objects handed in (final, in hand-in
    order) and the files settled before (:data:`Settled`)."""

    batch: str
    objects: list[JobObject[ImportColumns]]
    settled: list[Settled]

    def count(self, status: str) -> int:
        handed = sum(1 for obj in self.objects if obj.status == status)
        return handed + sum(1 for _, state, _ in self.settled if state == status)

    @property
    def ok(self) -> bool:
        return not (self.count("refused") or self.count("failed"))


def _settle(layout: Layout, sources: list[VerifiedSource]) -> list[Settled | None]:
    """What the index already decides of each verified file, reading only (blocking)."""
    index = IndexDB(layout.db_path, access="read")
    try:
        out: list[Settled | None] = []
        for source in sources:
            try:
                known = known_in_store(index, source)
            except ImportRejected as exc:
                out.append((source.path, "refused", "\n".join(exc.problems)))
                continue
            out.append((source.path, "present", known.name) if known is not None else None)
        return out
    finally:
        index.close()


async def add_files(
    store_settings: StoreSettings,
    sources: Sequence[Path],
    *,
    settings: JobsSettings | None = None,
    wait: bool = True,
    on_final: Callable[[JobObject[ImportColumns]], None] | None = None,
    on_settled: Callable[[Settled], None] | None = None,
    on_waiting: Callable[[list[JobObject[ImportColumns]]], None] | None = None,
    progress: Progress | None = None,
    poll_s: float = 0.2,
) -> AddReport:
    """Hand ``sources`` (absolute paths: other processes may import them) to the
    store and, with ``wait``, see them imported.

    With ``wait`` each file is first verified here (:func:`verify_source`;
    ``progress(n)`` as bytes are read) and compared with the index
    (:func:`known_in_store`): a file refused, or whose bytes the store holds
    already, is settled then (``on_settled``) and the store stays exactly as
    it was (it is not even made when nothing is left); the others are handed
    in ``verified``, and an import actor of this process stages and
    publishes them beside the server's and workers' actors, which may take
    them too. Without ``wait`` the files are handed in ``queued`` and left
    to those actors, verification included. Opens the store shared (beside
    a serving or recording gateway; raises
    :class:`~gateway.store.errors.StoreLocked` while ``store repair`` runs).
    Returns once every object of the batch is final (at once without
    ``wait``); ``on_final(obj)`` is called as each file's outcome is known,
    ``on_waiting(objs)`` when the only files left are held by other
    processes or backing off.
    """
    settled: list[Settled] = []

    def settle(item: Settled) -> None:
        settled.append(item)
        if on_settled is not None:
            on_settled(item)

    verified = await _verify_sources(sources, settle, progress) if wait else []
    if wait and not verified:
        return AddReport("", [], settled)
    from gateway.store.store import Store

    store = await Store.open(store_settings, mode="shared")
    db = JobsDB(store.layout.db_path, OBJECT_TYPES)
    try:
        if wait:
            verified = await _drop_known(store.layout, verified, settle)
            if not verified:
                return AddReport("", [], settled)
        batch, objects = await _hand_in(db, store.layout.root, sources, verified, wait=wait)
        if wait:
            objects = await _import_batch(
                db, store.layout.root, batch, settings, on_final, on_waiting, poll_s
            )
        return AddReport(batch, objects, settled)
    finally:
        await db.close()
        await store.close()


async def _verify_sources(
    sources: Sequence[Path], settle: Callable[[Settled], None], progress: Progress | None
) -> list[VerifiedSource]:
    """``store add``'s first step: each file verified here, one after the other; a file
    refused is settled, the others returned."""
    verified: list[VerifiedSource] = []
    for path in sources:
        checked = await asyncio.to_thread(verify, path, _never, progress)
        if isinstance(checked, Refused):
            settle((path, "refused", checked.reason))
        else:
            verified.append(checked)
    return verified


async def _drop_known(
    layout: Layout, verified: list[VerifiedSource], settle: Callable[[Settled], None]
) -> list[VerifiedSource]:
    """The verified files the index does not decide already (:func:`_settle`); the
    others (refused, or present in the store) are settled."""
    decided = await asyncio.to_thread(_settle, layout, verified)
    for item in decided:
        if item is not None:
            settle(item)
    return [v for v, item in zip(verified, decided, strict=True) if item is None]


async def _hand_in(
    db: JobsDB,
    root: Path,
    sources: Sequence[Path],
    verified: Sequence[VerifiedSource],
    *,
    wait: bool,
) -> tuple[str, list[JobObject[ImportColumns]]]:
    """Open the jobs database and write a new batch's objects (``verified`` with ``wait``,
    else ``sources``, queued); returns the batch's id and its objects as written."""
    try:
        await db.open()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store at {root}: {exc}") from exc
    batch = uuid.uuid4().hex
    if wait:
        await db.call(write_verified_import_objects, verified, batch)
    else:
        await db.call(write_import_objects, sources, batch)
    return batch, await db.call(read_batch, batch)


async def _import_batch(
    db: JobsDB,
    root: Path,
    batch: str,
    settings: JobsSettings | None,
    on_final: Callable[[JobObject[ImportColumns]], None] | None,
    on_waiting: Callable[[list[JobObject[ImportColumns]]], None] | None,
    poll_s: float,
) -> list[JobObject[ImportColumns]]:
    """Run an import actor of this process over ``batch`` until every object of it is
    final (others' actors may take some); returns the objects, final."""
    hooks = Hooks()
    hooks.add_object_types([IMPORT])
    ctx = JobContext(
        db=db,
        hooks=hooks,
        settings=settings or JobsSettings(),
        owner=f"store-add {os.getpid()}",
        app=StoreContext(root=root),
    )
    reported: set[int] = set()
    while True:
        await ImportActor(ctx, where=("batch = ?", [batch])).run()
        objects = await db.call(read_batch, batch)
        for obj in objects:
            if obj.retry_at is None and obj.id not in reported:
                reported.add(obj.id)
                if on_final is not None:
                    on_final(obj)
        pending = [obj for obj in objects if obj.retry_at is not None]
        if not pending:
            return objects
        if on_waiting is not None:
            on_waiting(pending)
        await asyncio.sleep(poll_s)


def _never() -> bool:
    return False
