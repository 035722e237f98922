"""Layout migrations: the chain of per-version steps, and the move each step makes.

A file's row records the layout it is stored under (``fs_version``);
:data:`gateway.store.layout.LAYOUTS` says where each layout puts a file.
:data:`STEPS` is the chain between them: ``STEPS[n - 1]`` brings a file from
version ``n`` to ``n + 1``. A step is one function; most future ones will
not move anything (a version whose directory is the previous one's only
records the new number: :meth:`Mover.relabel`), as in ArchiveBox's
filesystem migrations (``Snapshot.fs_version``, ``_fs_migrate_from_X_to_Y``),
whose model this follows. Adding a layout is one directory function in
``LAYOUTS`` and one step here.

Files move lazily, never at start-up (opening a store stays O(1), see
:mod:`gateway.store.layout`): :func:`migrate_file` is called

- *on write*, through :func:`ensure_current`, before the store records
  something new about a closed file (its SHA-256 recorded late, the end of a
  close's grace period, a copy status: :mod:`gateway.store.replication.director`),
  so a file that changes is in the current layout first; a scrub result
  (:mod:`gateway.store.integrity.scrub`) moves its file within what is left of the
  scrub's time-boxed tick (:attr:`Mover.stop`); and
- *in the background*, by ``gateway store migrate`` and the migrator
  (:mod:`gateway.store.migration.migrator`), newest first, in batches.

Every move (:meth:`Mover.move`), as borg and restic write what must survive
a crash:

1. take an ``flock`` on ``.<name>.moving`` in the new directory (another
   process moving the same file skips it), and read the row again;
2. copy the file there, starting after the bytes a killed run already
   copied (its SHA-256 is checked over the whole copy, so a torn tail is
   caught), and fsync;
3. read the copy back from the disk (the page cache dropped first) and
   compare its SHA-256 with the row's: a mismatch after a resumed copy
   starts it again once from zero; then the file is reported damaged (its
   source differs from its row) or the move abandoned (the copy does);
4. link the copy to its name in the new directory (never over another
   file: a different file there is a *name clash*, reported, and both stay
   as they are) and fsync the directory;
5. commit the new ``fs_version`` (compare-and-swap on the old one, on a
   connection that syncs each commit), and only then remove the old copy
   and the temporary name (removals need not be durable: a copy that comes
   back after a power loss is a second copy the reconcile pass removes).

Until step 5 commits, the old copy is the file: a kill -9 at any moment
leaves the row's place whole, and readers try the other layout's place too
(:meth:`Layout.candidates <gateway.store.layout.Layout.candidates>`), so a
capture loads during a move. What a kill leaves (a partial ``.moving`` copy,
a copy at the new place before the commit, the old copy after it) is picked
up by the next move of that file, or by the reconcile pass of
``store migrate``. A move fails cleanly on an I/O error (disk full): the
partial copy is removed, the row is unchanged, and the file is tried again
later. A move stopped by its caller (:attr:`Mover.stop`: a time box ran
out) keeps its partial copy under the lock's name, as a kill does, for the
next move to go on from. Only files the store owns (origin ``written`` or
``imported``) move; a ``found`` file stays where the user put it.

Before its first move a row of an older release gets what it lacks: its
SHA-256 (computed from the file as it is) and its date
(:func:`~gateway.store.verify.file_date`). Files with the same SHA-256 are
merged first (:func:`merge_duplicates`): the oldest row is kept, the
others' index entries point at it, and their bytes are removed after the
commit. Every function here is blocking.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Literal

from gateway.store.db import IndexDB
from gateway.store.errors import MoveFailed, StoreError
from gateway.store.layout import Layout, fsync_dir, moving_name
from gateway.store.recovery import file_sha256, lock_staged
from gateway.store.rows import FileRow
from gateway.store.verify import file_date
from gateway.store.warcfile import FaultInjector

__all__ = [
    "STEPS",
    "MoveResult",
    "Mover",
    "Outcome",
    "Step",
    "ensure_current",
    "flat_to_by_day",
    "merge_duplicates",
    "migrate_file",
    "needs_move",
]

logger = logging.getLogger(__name__)

_CHUNK: Final = 1 << 20
#: How often a move waiting for another mover's lock tries it again (seconds).
_LOCK_POLL_S: Final = 0.05

#: What happened to one file: ``current`` (nothing to do), ``moved``,
#: ``merged`` (it duplicated an older file, into which it was merged),
#: ``skipped`` (not the store's to move, or not closed yet), and the ways a
#: move stays undone for now: ``busy``, ``clash``, ``damaged``, ``missing``
#: (:class:`MoveFailed`), ``stopped`` (its caller's time ran out; the next
#: move goes on from its partial copy), ``failed`` (an I/O error: disk full, ...).
Outcome = Literal[
    "current",
    "moved",
    "merged",
    "skipped",
    "busy",
    "clash",
    "damaged",
    "missing",
    "stopped",
    "failed",
]


@dataclass(frozen=True, slots=True)
class MoveResult:
    """``file``: its row afterwards (as it was when nothing changed); ``detail``: why.

    ``merged``: how many files went in the merge (``file`` itself included
    when ``outcome`` is ``merged``, or duplicates merged into it).
    """

    file: FileRow
    outcome: Outcome
    detail: str = ""
    merged: int = 0


def _no_fault(point: str) -> None:
    return None


def _progress_nothing(count: int) -> None:
    return None


def _never() -> bool:
    return False


class Mover:
    """Moves closed files between layouts: :meth:`move` and :meth:`relabel`.

    ``inject``: the store's fault-injection hook
    (:data:`~gateway.store.warcfile.FaultInjector`), called with
    ``"move_copy"`` after each chunk copied and ``"move_commit"`` before the
    commit. ``progress(n)``: ``n`` more bytes copied or read back.
    ``stop()``: asked after each chunk copied or read back; when it says
    True the move raises :class:`MoveFailed` (``stopped``) and keeps its
    partial copy for the next move (a time-boxed caller: the scrub).
    ``wait_s``: how long a move waits for another mover of the same file
    (its lock) before it reports ``busy``; the background passes wait (a
    move on write finishes or stops within its caller's tick), moves on
    write do not (0). ``progress(0)`` is called while it waits.
    """

    def __init__(
        self,
        layout: Layout,
        db: IndexDB,
        *,
        inject: FaultInjector | None = None,
        progress: Callable[[int], object] = _progress_nothing,
        stop: Callable[[], bool] = _never,
        wait_s: float = 0.0,
    ) -> None:
        self.layout = layout
        self.db = db
        self._inject = inject or _no_fault
        self._progress = progress
        self.stop = stop
        self.wait_s = wait_s

    def relabel(self, file: FileRow, to: int) -> FileRow:
        """Record that ``file`` is under layout ``to`` without touching it.

        For a step whose layout puts files where the previous one did;
        raises :class:`StoreError` when it does not, and
        :class:`MoveFailed` (``busy``) when another process changed the row.
        """
        target = self.layout.path_of(file.name, fs_version=to, date=file.date)
        if target != self.layout.place(file):
            raise StoreError(f"layout {to} puts {file.name} elsewhere: its step must move it")
        if not self.db.set_fs_version(file.id, to, expected=file.fs_version):
            raise MoveFailed("busy", f"{file.name}: its row changed meanwhile")
        return replace(file, fs_version=to)

    def move(self, file: FileRow, to: int) -> FileRow:
        """Copy, verify, commit, remove: bring ``file`` to layout ``to`` (module docstring).

        Returns the row afterwards. Raises :class:`MoveFailed` (nothing
        changed but a leftover the next attempt picks up) or
        :class:`OSError` / :class:`sqlite3.Error` (the move is abandoned, its
        partial copy removed; the old copy stays authoritative).
        """
        source = self.layout.place(file)
        target = self.layout.path_of(file.name, fs_version=to, date=file.date)
        if target == source:
            return self.relabel(file, to)
        self.layout.make_directory(target.parent)
        temporary = target.with_name(moving_name(file.name))
        fd = self._lock(temporary)
        if fd is None:
            raise MoveFailed("busy", f"{file.name}: another mover is moving it")
        keep_partial = False
        try:
            fresh = self.db.file_by_id(file.id)
            if fresh is None or _facts(fresh) != _facts(file):
                raise MoveFailed("busy", f"{file.name}: its row changed meanwhile")
            self._place_copy(file, source, target, temporary, fd)
            self._inject("move_commit")
            if not self.db.set_fs_version(file.id, to, expected=file.fs_version):
                self._forget_copy(file, target, fd)
                raise MoveFailed("busy", f"{file.name}: its row changed meanwhile")
            _remove(source)
        except MoveFailed as exc:
            keep_partial = exc.kind == "stopped"
            raise
        finally:
            # The temporary name goes while the lock is held; a partial copy with
            # it (an error), a whole one stays linked at the target for the next
            # try. A stopped move leaves its partial copy, as a kill does.
            if not keep_partial:
                _remove(temporary, fd)
            os.close(fd)
        return replace(fresh, fs_version=to)

    def _lock(self, temporary: Path) -> int | None:
        """The move's lock on ``temporary``, waiting up to :attr:`wait_s` for another mover."""
        give_up = time.monotonic() + self.wait_s
        while (fd := lock_staged(temporary, create=True)) is None:
            if time.monotonic() >= give_up:
                return None
            self._progress(0)
            time.sleep(_LOCK_POLL_S)
        return fd

    # ----------------------------------------------------------------- steps
    def _place_copy(
        self, file: FileRow, source: Path, target: Path, temporary: Path, fd: int
    ) -> None:
        """Steps 2 to 4: a verified copy linked at ``target`` (or found there already)."""
        assert file.sha256 is not None
        try:
            there = os.stat(target)
        except FileNotFoundError:
            there = None
        if there is not None:
            if os.path.samestat(there, os.fstat(fd)):
                return  # linked before a crash: copied and verified already
            if file_sha256(target) == file.sha256:
                return  # a whole copy a killed move left (or the same bytes): adopt it
            raise MoveFailed(
                "clash",
                f"{target} exists and is another file; both are kept, and {file.name} stays "
                f"at {source.relative_to(self.layout.root)} (its row's place)",
            )
        if not source.is_file():
            raise MoveFailed("missing", f"{file.name} is not at {source}")
        resumed = self._copy(source, fd)
        if not self._copy_matches(fd, file.sha256, file.name):
            if resumed:  # what a killed run left may be torn: copy it all again
                os.ftruncate(fd, 0)
                self._copy(source, fd)
            if not self._copy_matches(fd, file.sha256, file.name):
                if file_sha256(source) != file.sha256:
                    raise MoveFailed(
                        "damaged",
                        f"{file.name}: its bytes differ from the SHA-256 its row records "
                        "(run `gateway store check`, then `gateway store repair`)",
                    )
                raise OSError(errno.EIO, f"the copy of {file.name} read back differs from it")
        try:
            os.link(temporary, target)  # the name is ours: we hold its lock
        except FileExistsError:  # made meanwhile by someone who did not hold the lock
            raise MoveFailed("clash", f"{target} appeared during the move; both are kept") from None
        fsync_dir(target.parent)

    def _copy(self, source: Path, fd: int) -> bool:
        """Copy ``source`` into ``fd`` after the bytes already there; fsync. True if resumed."""
        size = source.stat().st_size
        done = os.fstat(fd).st_size
        if done > size:
            os.ftruncate(fd, 0)
            done = 0
        resumed = done > 0
        self._progress(done)
        with source.open("rb") as src:
            while done < size:
                count = _copy_range(src.fileno(), fd, min(_CHUNK, size - done), done)
                if count == 0:
                    raise OSError(errno.EIO, f"{source} ended at {done} of {size} bytes")
                done += count
                self._progress(count)
                self._inject("move_copy")
                if done < size and self.stop():
                    raise MoveFailed("stopped", _stopped(source.name, "copied", done, size))
        os.fsync(fd)
        return resumed

    def _copy_matches(self, fd: int, sha256: str, name: str) -> bool:
        """Read the copy back from the disk (not the page cache) and compare its SHA-256."""
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        digest = hashlib.sha256()
        position = 0
        size = os.fstat(fd).st_size
        while chunk := os.pread(fd, _CHUNK, position):
            digest.update(chunk)
            position += len(chunk)
            self._progress(len(chunk))
            if position < size and self.stop():
                raise MoveFailed("stopped", _stopped(name, "read back", position, size))
        return digest.hexdigest() == sha256

    def _forget_copy(self, file: FileRow, target: Path, fd: int) -> None:
        """The row went away during the move (merged, repaired): remove the copy this move made."""
        try:
            ours = os.path.samestat(os.stat(target), os.fstat(fd))
        except FileNotFoundError:
            return
        if ours and self.db.file_by_id(file.id) is None:
            _remove(target)


def _stopped(name: str, doing: str, done: int, size: int) -> str:
    return (
        f"{name}: the move stopped when its time ran out, {done} of {size} bytes {doing};"
        " the next move goes on from there"
    )


def _facts(file: FileRow) -> tuple[object, ...]:
    """What a move depends on: if any of it changed, the move is another process's now."""
    return (file.state, file.fs_version, file.sha256, file.date, file.open_link)


def _copy_range(src: int, dst: int, count: int, offset: int) -> int:
    """Copy ``count`` bytes at ``offset`` from ``src`` to the same offset of ``dst``.

    ``copy_file_range`` (in the kernel, no user-space buffer), or a read and
    a write where the file systems do not support it.
    """
    try:
        return os.copy_file_range(src, dst, count, offset, offset)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            raise
    data = os.pread(src, count, offset)
    view = memoryview(data)
    written = 0
    while written < len(data):
        written += os.pwrite(dst, view[written:], offset + written)
    return len(data)


def _remove(path: Path, fd: int | None = None) -> None:
    """Unlink ``path`` if it is there (and, with ``fd``, still that file).

    Not made durable (no fsync of the directory): every removal here is of
    a copy whose row no longer needs it, so one that comes back after a
    power loss is a second copy, which check notes and the reconcile pass
    removes again. It saves two fsyncs per move.
    """
    try:
        if fd is not None and not os.path.samestat(os.stat(path), os.fstat(fd)):
            return
        path.unlink()
    except FileNotFoundError:
        return


# ------------------------------------------------------------------- steps
#: One layout step: bring a closed file from version ``n`` to ``n + 1``
#: (``STEPS[n - 1]``); returns its row afterwards.
Step = Callable[[Mover, FileRow], FileRow]


def flat_to_by_day(mover: Mover, file: FileRow) -> FileRow:
    """1 -> 2: from the flat ``warcs/`` to ``warcs/YYYY/MM/DD/`` (a move)."""
    return mover.move(file, 2)


#: The chain, in order: ``STEPS[n - 1]`` migrates a file from layout ``n``.
STEPS: Final[tuple[Step, ...]] = (flat_to_by_day,)


# ---------------------------------------------------------------- one file
def needs_move(layout: Layout, file: FileRow) -> bool:
    """True when ``file`` is the store's, closed, settled, and under an older layout.

    A closed file whose ``.open`` name is still linked (``open_link``, the
    grace period after its close) waits until the writer removes that name.
    """
    return (
        file.owned
        and file.state == "closed"
        and not file.open_link
        and file.fs_version < layout.current
    )


def _settle(layout: Layout, db: IndexDB, file: FileRow) -> FileRow:
    """Give a row of an older release what a move needs: where it is, its SHA-256, its date."""
    place = layout.place(file)
    if not place.is_file():
        file = _found_elsewhere(layout, db, file)
        place = layout.place(file)
    if file.sha256 is None:
        db.set_sha256(file.id, file_sha256(place))
    if file.date is None:
        db.set_date(file.id, file_date(place))
    if file.sha256 is None or file.date is None:
        fresh = db.file_by_id(file.id)
        if fresh is None:
            raise MoveFailed("busy", f"{file.name}: its row went away meanwhile")
        file = fresh
    return file


def _found_elsewhere(layout: Layout, db: IndexDB, file: FileRow) -> FileRow:
    """A file not at its row's place but, whole, at another layout's: record where it is."""
    for path in layout.candidates(file)[1:]:
        if not path.is_file() or file.sha256 is None or file_sha256(path) != file.sha256:
            continue
        version = layout.version_at(path, file.date)
        if version is not None and db.set_fs_version(file.id, version, expected=file.fs_version):
            logger.warning(
                "store: %s was not at its row's place; found whole at %s, its row now says so",
                file.name,
                path,
            )
            return replace(file, fs_version=version)
    raise MoveFailed(
        "missing",
        f"{file.name} is not at {layout.place(file).relative_to(layout.root)} "
        "nor, whole, at any other layout's place",
    )


def merge_duplicates(layout: Layout, db: IndexDB, file: FileRow) -> tuple[FileRow | None, int]:
    """Merge the closed files the store owns that have ``file``'s SHA-256 into the oldest.

    The oldest row (smallest id) is kept. For each other one, both files'
    bytes are checked against the SHA-256 first (a damaged copy is neither
    kept nor removed: it is left for ``store check``); then in one
    transaction its index entries point at the kept file
    (:meth:`IndexDB.merge_file <gateway.store.db.IndexDB.merge_file>`), and
    after the commit its bytes are removed. Returns the row ``file`` now
    is (the kept one, or None when ``file`` was merged into another) and
    how many files were merged. Files the store does not own (``found``)
    are never merged.
    """
    if file.sha256 is None or not file.owned:
        return file, 0
    group = [
        other
        for other in db.files_with_sha256(file.sha256)
        if other.owned and other.state == "closed" and not other.open_link
    ]
    if len(group) < 2:
        return file, 0
    kept, *duplicates = sorted(group, key=lambda row: row.id)
    if file_sha256(layout.place(kept)) != kept.sha256:
        logger.warning("store: %s differs from its SHA-256; its duplicates are kept", kept.name)
        return file, 0
    merged = 0
    for duplicate in duplicates:
        path = layout.place(duplicate)
        try:
            intact = file_sha256(path) == duplicate.sha256
        except FileNotFoundError:
            intact = False
        if not intact:
            logger.warning("store: %s is not whole at %s; not merged", duplicate.name, path)
            continue
        moved = db.merge_file(duplicate, kept)
        if moved is None:
            continue
        merged += 1
        _remove(path)
        logger.info(
            "store: merged %s into %s (the same SHA-256): %d index entries moved, its copy removed",
            duplicate.name,
            kept.name,
            moved,
        )
        if duplicate.id == file.id:
            return None, merged
    return (kept if kept.id == file.id else file), merged


def migrate_file(
    layout: Layout,
    db: IndexDB,
    file: FileRow,
    *,
    steps: tuple[Step, ...] | None = None,
    mover: Mover | None = None,
) -> MoveResult:
    """Bring one file to the current layout, step by step (module docstring).

    ``steps`` defaults to :data:`STEPS` (read at call time) and must have
    one step per layout after the first. Never raises for a file that stays
    where it is: the result says why (:data:`Outcome`). Raises
    :class:`StoreError` only for a chain that does not match the layouts.
    """
    chain = STEPS if steps is None else steps
    if len(chain) != len(layout.layouts) - 1:
        raise StoreError(
            f"{len(layout.layouts)} layouts need {len(layout.layouts) - 1} migration steps; "
            f"{len(chain)} are declared"
        )
    if not needs_move(layout, file):
        return MoveResult(file, "current" if file.fs_version >= layout.current else "skipped")
    if not layout.place(file).is_file():  # another process may have moved it since the read
        fresh = db.file_by_id(file.id)
        if fresh is None:
            return MoveResult(file, "skipped", f"{file.name}: its row went away meanwhile")
        if fresh != file and not needs_move(layout, fresh):
            return MoveResult(fresh, "current" if fresh.fs_version >= layout.current else "skipped")
        file = fresh
    mover = mover or Mover(layout, db)
    merged = 0
    try:
        file = _settle(layout, db, file)
        kept, merged = merge_duplicates(layout, db, file)
        if kept is None:
            return MoveResult(file, "merged", merged=merged)
        file = kept
        for version in range(file.fs_version, layout.current):
            file = chain[version - 1](mover, file)
    except MoveFailed as exc:
        if exc.kind == "busy":  # another mover may have finished it meanwhile
            fresh = db.file_by_id(file.id)
            if fresh is None:
                return MoveResult(file, "skipped", f"{file.name}: its row went away", merged)
            if not needs_move(layout, fresh):
                done: Outcome = "current" if fresh.fs_version >= layout.current else "skipped"
                return MoveResult(fresh, done, merged=merged)
        return MoveResult(file, _outcome(exc.kind), exc.message, merged)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        detail = f"{file.name}: the move was abandoned and will be tried again ({reason})"
        return MoveResult(file, "failed", detail, merged)
    return MoveResult(file, "moved", merged=merged)


def _outcome(kind: str) -> Outcome:
    for outcome in ("busy", "clash", "damaged", "missing", "stopped"):
        if kind == outcome:
            return outcome
    return "failed"


def ensure_current(
    layout: Layout, db: IndexDB, file: FileRow, *, mover: Mover | None = None
) -> MoveResult:
    """The on-write path: move ``file`` to the current layout before its row is written.

    Call it with the row about to change (a close's grace period ended, a
    SHA-256 recorded, a copy status about to be written, a scrub result
    about to be recorded). A file that cannot move now stays where it is
    and the write goes ahead (a WARNING says why, an INFO line when the
    caller's ``mover`` stopped it; the background migrator tries again).
    Returns the result: its ``file`` is the row afterwards, the same row
    when the file was merged into another.
    """
    result = migrate_file(layout, db, file, mover=mover)
    if result.outcome not in ("current", "moved", "merged", "skipped"):
        logger.log(
            logging.INFO if result.outcome == "stopped" else logging.WARNING,
            "store: %s stays in layout %d for now: %s",
            file.name,
            file.fs_version,
            result.detail,
        )
    return result
