"""Online import: WARC files handed to a store that may be serving (``gateway store add``).

``gateway store add FILE...`` writes one ``import`` object per file (its
absolute path, a batch id) into the store's database and, unless told not
to wait, runs an import actor over its own batch while it reports each
file's outcome; the actors of ``gateway serve`` and ``gateway worker`` take
the same objects (claims are compare-and-swap), so a command that is
stopped leaves its files to them. Nothing needs the store's lock: the file
is linked into ``warcs/`` create-only and its rows go into the index in
WAL mode beside the serving process's writer, so its captures are findable
as soon as the rows are committed, without a restart.

::

    queued --(verify with warcio, copy to incoming/<id>-<name>.part)--> copied
    copied --(link into warcs/, index, remove the copy)--> imported
    queued --> present    the same bytes are in the store under that name
    queued, copied --> refused   not a valid WARC, or another file has the name
    queued, copied --> failed    five failed ticks in a row (last_error)

Each step is idempotent: a tick cut short (killed, past its limit) is done
again, from the copy or from the link, with the same result. The verified
copy is checked by its SHA-256 before it is linked.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gateway.jobs.actors import JobContext, WorkCancelled, in_thread
from gateway.jobs.db import JobObject, JobsDB, Value, read_object, utcnow, write_objects
from gateway.jobs.hooks import Hooks
from gateway.jobs.model import ObjectType
from gateway.jobs.settings import JobsSettings
from gateway.store.db import IndexDB
from gateway.store.errors import ImportRejected, StoreError
from gateway.store.importer import prepare_import, sha256_of
from gateway.store.layout import OPEN_SUFFIX, Layout, fsync_dir, is_warc_name
from gateway.store.recovery import index_tail
from gateway.store.scrub import write_scrub_object
from gateway.store.store_actor import StoreActorType

__all__ = [
    "IMPORT",
    "AddReport",
    "ImportActor",
    "add_files",
    "read_batch",
    "write_import_objects",
]

logger = logging.getLogger(__name__)

IMPORT: Final = ObjectType(
    name="import",
    description="a WARC file handed to the store (gateway store add)",
    states=("queued", "copied", "imported", "present", "refused", "failed"),
    initial="queued",
    final=("imported", "present", "refused", "failed"),
    transitions=(
        ("queued", "copied"),
        ("queued", "present"),
        ("queued", "refused"),
        ("queued", "failed"),
        ("copied", "imported"),
        ("copied", "refused"),
        ("copied", "failed"),
    ),
    columns=(
        ("batch", "TEXT NOT NULL DEFAULT ''"),
        ("source_path", "TEXT NOT NULL"),
        ("name", "TEXT NOT NULL DEFAULT ''"),
        ("staged_path", "TEXT NOT NULL DEFAULT ''"),
        ("sha256", "TEXT NOT NULL DEFAULT ''"),
        ("size", "INTEGER NOT NULL DEFAULT 0"),
        ("records", "INTEGER NOT NULL DEFAULT 0"),
        ("reason", "TEXT NOT NULL DEFAULT ''"),
    ),
    indexes=(("batch",),),
    attention_states=("refused", "failed"),
    label_column="source_path",
    detail_column="reason",
)

#: Bytes of progress per byte of source: framing, warcio, then the copy.
_PASSES: Final = 3


def incoming_dir(layout: Layout) -> Path:
    """Where verified copies wait to be linked into ``warcs/``."""
    return layout.root / "incoming"


# ------------------------------------------------------------------ reads/writes
def write_import_objects(
    conn: sqlite3.Connection, sources: Sequence[Path], batch: str
) -> list[int]:
    """Hand ``sources`` to the store: one queued object each, one transaction.

    The paths are stored as given: make them absolute first, since another
    process (a server in another directory) may be the one to import them.
    """
    rows = [{"batch": batch, "source_path": str(p), "name": p.name} for p in sources]
    return write_objects(conn, IMPORT, utcnow(), rows)


def read_batch(conn: sqlite3.Connection, batch: str) -> list[JobObject]:
    """The import objects of ``batch``, in the order they were handed in."""
    rows = conn.execute(
        f"SELECT {', '.join(IMPORT.column_names)} FROM {IMPORT.table} WHERE batch = ? ORDER BY id",
        (batch,),
    ).fetchall()
    return [JobObject.from_row(IMPORT, row) for row in rows]


# ------------------------------------------------------------ the work of ticks
@dataclass(frozen=True, slots=True)
class Staged:
    """A verified copy of the source, waiting at ``path``."""

    path: Path
    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class Present:
    """The same bytes are already in the store under the file's name."""


@dataclass(frozen=True, slots=True)
class Refused:
    """Why the file will not be imported, one problem per line."""

    reason: str


@dataclass(frozen=True, slots=True)
class Imported:
    """Linked and indexed; ``records``: index entries of the file."""

    records: int


Progress = Callable[[int], None]


def _checker(cancel: threading.Event, progress: Progress | None) -> Progress:
    def advance(n: int) -> None:
        if cancel.is_set():
            raise WorkCancelled("the import tick was cancelled")
        if progress is not None:
            progress(n)

    return advance


def stage(
    layout: Layout,
    index: IndexDB,
    obj: JobObject,
    cancel: threading.Event,
    progress: Progress | None = None,
) -> Staged | Present | Refused:
    """The ``queued`` tick's work (blocking): compare with the store, verify, copy."""
    source = Path(str(obj["source_path"]))
    name = source.name
    if not is_warc_name(name):
        return Refused("expected a .warc or .warc.gz file name")
    target = layout.warcs / name
    try:
        if (
            index.file_by_name(name) is not None
            or target.exists()
            or (layout.warcs / (name + OPEN_SUFFIX)).exists()
        ):
            if target.exists() and sha256_of(target) == sha256_of(source):
                return Present()
            return Refused(
                f"a different file named {name} is already in the store; rename it to import it"
            )
        staged = incoming_dir(layout) / f"{obj.id}-{name}.part"
        staged.parent.mkdir(parents=True, exist_ok=True)
        plan = prepare_import(layout, source, progress=_checker(cancel, progress), copy_to=staged)
    except ImportRejected as exc:
        return Refused("\n".join(exc.problems))
    except OSError as exc:
        return Refused(f"cannot read: {exc}")
    return Staged(plan.copy, plan.sha256, plan.copy.stat().st_size)


def commit(
    layout: Layout, index: IndexDB, obj: JobObject, scrub_interval_s: float
) -> Imported | Refused:
    """The ``copied`` tick's work (blocking): link create-only, index, drop the copy.

    The file's scrub object starts ``good`` (it was verified before the
    copy), due again in ``scrub_interval_s``.
    """
    staged = Path(str(obj["staged_path"]))
    name = str(obj["name"])
    target = layout.warcs / name
    if staged.exists():
        try:
            os.link(staged, target)
        except FileExistsError:
            # Linked by an earlier try of this tick, or another file took the name.
            if sha256_of(target) != obj["sha256"]:
                _remove_staged(staged)
                return Refused(
                    f"a different file named {name} came into the store meanwhile;"
                    " rename it to import it"
                )
        fsync_dir(layout.warcs)
    elif not target.exists() or sha256_of(target) != obj["sha256"]:
        raise StoreError(f"the verified copy {staged} is gone; hand {obj['source_path']} in again")
    file = index.file_by_name(name) or index.add_file(name, is_open=False, origin="imported")
    _, problem = index_tail(index, file, target, truncate=False)
    if problem:  # verified before the copy: only a disk error gets here
        raise StoreError(f"warcs/{name} does not read back as it was verified: {problem}")
    records = index.count_rows(file.id)
    write_scrub_object(
        index.conn, name, utcnow(), verified_records=records, interval_s=scrub_interval_s
    )
    _remove_staged(staged)
    return Imported(records)


def _remove_staged(staged: Path) -> None:
    if staged.exists():
        staged.unlink()
        fsync_dir(staged.parent)


# --------------------------------------------------------------------- the actor
class ImportActor(StoreActorType):
    """Ticks import objects: ``queued`` (verify and copy), ``copied`` (link and index)."""

    name = "import"
    object_type = IMPORT
    queue_states = ("queued", "copied")
    max_concurrent = 1
    max_tick_s = 3600.0
    backoff_base_s = 2.0
    backoff_max_s = 600.0
    max_attempts = 5
    give_up_state = "failed"
    index_access = "write"
    #: ``progress(n)``: ``n`` more bytes verified or copied (``store add`` draws it).
    progress: Progress | None = None

    @classmethod
    def limits(cls, settings: JobsSettings) -> tuple[int, float]:
        return settings.import_max_concurrent, settings.import_max_tick_s

    @classmethod
    async def seed(cls, ctx: JobContext) -> None:
        """Remove copies left in ``incoming/`` by imports that ended (refused, failed)."""
        layout = Layout(ctx.store_root)
        directory = incoming_dir(layout)
        if not directory.is_dir():
            return
        for path in directory.glob("*.part"):
            head = path.name.split("-", 1)[0]
            if not head.isdigit():
                continue
            try:
                obj = await ctx.db.call(read_object, IMPORT, int(head))
            except KeyError:
                obj = None
            if obj is None or obj.retry_at is None:
                await asyncio.to_thread(_remove_staged, path)

    async def tick(self, obj: JobObject) -> None:
        if obj.status == "queued":
            outcome = await in_thread(
                lambda cancel: stage(self.layout, self.index, obj, cancel, self.progress)
            )
            if isinstance(outcome, Staged):
                await self.transition_import_queued_to_copied(obj, outcome)
            elif isinstance(outcome, Present):
                await self.transition_import_queued_to_present(obj)
            else:
                await self.transition_import_queued_to_refused(obj, outcome.reason)
        else:
            interval_s = self.ctx.settings.scrub_interval_days * 86_400.0
            result = await asyncio.to_thread(commit, self.layout, self.index, obj, interval_s)
            if isinstance(result, Imported):
                await self.transition_import_copied_to_imported(obj, result.records)
            else:
                await self.transition_import_copied_to_refused(obj, result.reason)

    # -------------------------------------------------------------- transitions
    async def transition_import_queued_to_copied(self, obj: JobObject, staged: Staged) -> bool:
        values: dict[str, Value] = {
            "staged_path": str(staged.path),
            "sha256": staged.sha256,
            "size": staged.size,
        }
        return await self.transition(obj, "queued", "copied", retry_at=utcnow(), values=values)

    async def transition_import_queued_to_present(self, obj: JobObject) -> bool:
        return await self.transition(obj, "queued", "present", retry_at=None)

    async def transition_import_queued_to_refused(self, obj: JobObject, reason: str) -> bool:
        return await self.transition(
            obj, "queued", "refused", retry_at=None, values={"reason": reason}
        )

    async def transition_import_queued_to_failed(self, obj: JobObject, *, error: str) -> bool:
        return await self.transition(obj, "queued", "failed", retry_at=None, error=error)

    async def transition_import_copied_to_imported(self, obj: JobObject, records: int) -> bool:
        return await self.transition(
            obj, "copied", "imported", retry_at=None, values={"records": records}
        )

    async def transition_import_copied_to_refused(self, obj: JobObject, reason: str) -> bool:
        return await self.transition(
            obj, "copied", "refused", retry_at=None, values={"reason": reason}
        )

    async def transition_import_copied_to_failed(self, obj: JobObject, *, error: str) -> bool:
        return await self.transition(obj, "copied", "failed", retry_at=None, error=error)


# ------------------------------------------------------------------ store add
@dataclass(slots=True)
class AddReport:
    """The outcome of ``store add``: final objects by state, in hand-in order."""

    batch: str
    objects: list[JobObject]

    def count(self, status: str) -> int:
        return sum(1 for obj in self.objects if obj.status == status)

    @property
    def ok(self) -> bool:
        return not (self.count("refused") or self.count("failed"))


async def add_files(
    root: Path,
    sources: Sequence[Path],
    *,
    settings: JobsSettings | None = None,
    wait: bool = True,
    on_final: Callable[[JobObject], None] | None = None,
    on_waiting: Callable[[list[JobObject]], None] | None = None,
    progress: Progress | None = None,
    poll_s: float = 0.2,
) -> AddReport:
    """Hand ``sources`` (absolute paths: other processes may import them) to the
    store at ``root`` and, with ``wait``, see them imported.

    Returns once every object of the batch is final (or at once without
    ``wait``). ``on_final(obj)`` is called as each file's outcome is known,
    in hand-in order as far as they finish in it; ``on_waiting(objs)`` when
    the only files left are held by other processes or backing off;
    ``progress(n)`` as this process verifies and copies bytes.
    """
    layout = Layout(root)
    db = JobsDB(layout.db_path)
    try:
        await asyncio.to_thread(layout.create)
        await db.open()
    except (OSError, sqlite3.Error) as exc:
        await db.close()
        raise StoreError(f"cannot open the store at {layout.root}: {exc}") from exc
    try:
        batch = uuid.uuid4().hex
        await db.call(write_import_objects, sources, batch)
        objects = await db.call(read_batch, batch)
        if not wait:
            return AddReport(batch, objects)
        hooks = Hooks()
        hooks.add_object_types([IMPORT])
        ctx = JobContext(
            db=db,
            hooks=hooks,
            settings=settings or JobsSettings(),
            store_root=layout.root,
            owner=f"store-add {os.getpid()}",
        )
        reported: set[int] = set()
        while True:
            actor = ImportActor(ctx, where=("batch = ?", [batch]))
            actor.progress = progress
            await actor.run()
            objects = await db.call(read_batch, batch)
            for obj in objects:
                if obj.retry_at is None and obj.id not in reported:
                    reported.add(obj.id)
                    if on_final is not None:
                        on_final(obj)
            pending = [obj for obj in objects if obj.retry_at is not None]
            if not pending:
                return AddReport(batch, objects)
            if on_waiting is not None:
                on_waiting(pending)
            await asyncio.sleep(poll_s)
    finally:
        await db.close()
