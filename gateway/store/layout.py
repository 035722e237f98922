"""The store's directory layout, WARC file names, and the locks several processes share.

::

    <root>/                      default ./archive/store (never a directory a
                                 collection of the default config reads)
      store.lock                 flock: see "Locks" below
      writer.lock                flock: held by the one process writing WARC files
      jobs.lock                  flock: the serving process that runs the background
                                 jobs (gateway.jobs; workers run theirs anyway)
      index.sqlite3              the capture and file index (WAL mode; -wal, -shm)
      warcs/                     the store's WARC files, in the layout of each row's
                                 ``fs_version``; CDX ``filename`` values are their names
        2025/03/01/              layout 2 (the current one): by creation date, UTC
          gateway-20250301120000-00001.warc.gz        closed
          gateway-20250301130000-00002.warc.gz.open   being written
          .gateway-20250301110000-00009.warc.gz.moving  a move in progress (see below)
        2014/01/26/example.warc.gz                    imported by `store add`
        gateway-20240506070809-00001.warc.gz          layout 1 (flat), not moved yet
      incoming/                  `store add` copies files here first (one per import)
      invalid/YYYYMMDD/          store-written files `store repair` or `store migrate`
                                 could not read

**Layouts.** Where a file lives is derived from its row alone (name,
``date``, ``fs_version``) by :meth:`Layout.place`, the one function that
says it. :data:`LAYOUTS` lists the layout of each version, from 1: layout 1
is flat ``warcs/<name>`` (every release up to af8b42d); layout 2 is
``warcs/YYYY/MM/DD/<name>`` by the file's creation date (the date in the
names the writer gives, or the first record's ``WARC-Date`` of an imported
file), so that no directory grows past one day of captures. The store writes
new files in the newest layout (:data:`FS_VERSION`) and moves the others to
it lazily (:mod:`gateway.store.migration.layout_steps`); while a file moves, readers find
it in either place (:meth:`Layout.candidates`). A move copies the file to
``.<name>.moving`` in the new directory, under an ``flock`` of that name, and
links it to its name there once its SHA-256 matches the row. CDX
``filename`` values name the file, not its directory, so they never change.

Names the writer gives its files: ``{prefix}-{YYYYMMDDhhmmss}-{serial:05d}.warc.gz``
(UTC creation time; serial one above the newest file the writer created),
with the suffix ``.open`` until the file is closed. Imported files keep their
own names.

**What the store touches.** It creates, renames, moves and deletes only files
it wrote: a file's index row is committed before the file is created (so no
crash leaves a file of the store that the index does not know), and a row's
``origin`` says whether the store wrote the file (``written``, ``imported``:
the store wrote the copy) or adopted it (``found``, by an older release: read,
never moved). Anything else under ``warcs/`` is reported by ``store check``
and left where it is.

**Opening is O(1) in the store's size.** It applies the schema's migration
steps and looks only at what the index says may be unfinished (files still
``open``, imports in progress, ``.open`` names kept after a close) and at
``incoming/``; it never lists ``warcs/``. Orphan files (on disk, not in the
index) are reported by ``store check``; ``store repair`` indexes the ones
this store wrote.

**Locks.** Every lock is an ``flock`` (released by the kernel when its
holder dies, so a kill -9 leaves no stale lock), never waited for:

- ``store.lock`` *shared* by every process that has the store open
  (``gateway serve``, ``gateway worker``, ``store add``, ``store history``,
  ``store check`` beside others) and *exclusive* for ``store repair`` (it
  rewrites files, so it needs the store to itself; ``store check`` on a
  store nobody has open holds it exclusive too, to read a still index).
- ``writer.lock`` *exclusive* by the one process that writes WARC files
  (a gateway that records), taken after ``store.lock``. Whoever takes it
  first finishes what a writer that died left (closes its ``.open`` file).
- ``incoming/<name>`` *exclusive* by the process importing ``name``, for the
  whole import: another process finding the row ``importing`` and the lock
  free knows the importer died, and finishes or undoes its import.

Index writes from several processes are serialized by SQLite (WAL mode, one
short ``BEGIN IMMEDIATE`` transaction per write, see :mod:`gateway.store.db`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal, Protocol

from gateway.paths import absolute_path
from gateway.store.errors import StoreError, StoreLocked

__all__ = [
    "DEFAULT_ROOT",
    "FS_VERSION",
    "IMPORTING_SUFFIX",
    "LAYOUTS",
    "MOVING_SUFFIX",
    "OPEN_SUFFIX",
    "WARC_EXTENSIONS",
    "Directory",
    "Layout",
    "Placed",
    "StoreLock",
    "by_day",
    "date_of_name",
    "flat",
    "fsync_dir",
    "is_archive_name",
    "is_moving_name",
    "layout_for",
    "moving_name",
    "utc_timestamp",
]

#: The store's default root: a directory of its own beside the default
#: config's ``./archive/indexes/`` and ``./archive/warcs/``.
DEFAULT_ROOT: Final = "./archive/store"
#: The root an older release used by default (``store.root`` unset).
LEGACY_DEFAULT_ROOT: Final = "./archive"

OPEN_SUFFIX: Final = ".open"
#: The suffix of a move's copy in progress: ``.<name>.moving`` (hidden).
MOVING_SUFFIX: Final = ".moving"
#: Temporary names of imports in ``warcs/`` by older releases.
IMPORTING_SUFFIX: Final = ".importing"
#: What ``store add`` accepts, and what the gateway serves: WARC (0.17 to
#: 1.1) and ARC files, gzipped (a member per record) or not.
WARC_EXTENSIONS: Final = (".warc.gz", ".warc", ".arc.gz", ".arc")
#: A name the writer gave, or ``store repair``'s salvaged copy of one.
_WRITTEN = re.compile(r"-(\d{14})-(\d{5,})(?:-salvaged\d*)?\.warc\.gz$")


_DATE: Final = re.compile(r"\d{14}")

#: The directory of one layout version: ``directory(warcs, date)`` for a file
#: created at ``date`` (14 digits, UTC; None when the row has none yet).
#: Raises :class:`StoreError` when the layout needs a date it is not given.
Directory = Callable[[Path, str | None], Path]


def flat(warcs: Path, date: str | None) -> Path:
    """Layout 1: every file directly in ``warcs/`` (the releases up to af8b42d).

    >>> flat(Path("warcs"), None)
    PosixPath('warcs')
    """
    return warcs


def by_day(warcs: Path, date: str | None) -> Path:
    """Layout 2: ``warcs/YYYY/MM/DD/`` by the file's creation date (UTC).

    >>> by_day(Path("warcs"), "20250301120000")
    PosixPath('warcs/2025/03/01')
    """
    if date is None or not _DATE.fullmatch(date):
        raise StoreError(
            f"layout 2 places a file by its 14-digit creation date; got {date!r} "
            "(`gateway store migrate` records the missing dates first)"
        )
    return warcs / date[:4] / date[4:6] / date[6:8]


#: The layout of each version, from 1 (``LAYOUTS[n - 1]`` is version ``n``).
#: Adding a version: append its directory function here and its step to
#: :data:`gateway.store.migration.layout_steps.STEPS`; the new version is the one the
#: store writes from then on, and files move to it lazily.
LAYOUTS: Final[tuple[Directory, ...]] = (flat, by_day)

#: The layout version this release writes: the newest in :data:`LAYOUTS`.
FS_VERSION: Final = len(LAYOUTS)


#: Directories :meth:`Layout.directory_of` remembers (then it starts afresh).
_DIRECTORIES_KEPT: Final = 4096


class Placed(Protocol):
    """What a file's place is derived from: the columns of its row."""

    @property
    def name(self) -> str: ...
    @property
    def fs_version(self) -> int: ...
    @property
    def date(self) -> str | None: ...


def moving_name(name: str) -> str:
    """The hidden name a move copies ``name`` to before linking it.

    >>> moving_name("a.warc.gz")
    '.a.warc.gz.moving'
    """
    return f".{name}{MOVING_SUFFIX}"


def is_moving_name(name: str) -> bool:
    """True for a move's copy in progress (:func:`moving_name`).

    >>> is_moving_name(".a.warc.gz.moving"), is_moving_name("a.warc.gz")
    (True, False)
    """
    return name.startswith(".") and name.endswith(MOVING_SUFFIX) and len(name) > 8


def utc_timestamp(when: datetime | None = None) -> str:
    """``when`` (default now) as 14 digits, UTC: the form of a row's ``date``."""
    return (when or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%d%H%M%S")


def is_archive_name(name: str) -> bool:
    """True for a closed WARC or ARC file name, not hidden and without a directory.

    >>> is_archive_name("a.warc.gz"), is_archive_name("a.arc"), is_archive_name("a.warc.gz.open")
    (True, True, False)
    >>> is_archive_name(".x.warc"), is_archive_name("a.warc.gz.bad")
    (False, False)
    """
    return (
        not name.startswith(".")
        and "/" not in name
        and name.endswith(WARC_EXTENSIONS)
        and name not in WARC_EXTENSIONS
    )


def date_of_name(name: str) -> str | None:
    """The 14-digit creation date in a name the writer gives (``.open`` allowed), else None.

    >>> date_of_name("gateway-20250301120000-00042.warc.gz.open")
    '20250301120000'
    >>> date_of_name("example.warc.gz") is None
    True
    """
    match = _WRITTEN.search(name.removesuffix(OPEN_SUFFIX))
    return match.group(1) if match else None


def fsync_dir(path: Path) -> None:
    """fsync a directory so that renames and new names in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def layout_for(root: str) -> Layout:
    """The layout of the store at ``root`` (a ``store.root`` setting); creates nothing.

    Raises :class:`StoreError` when ``root`` is the default and holds no
    store while ``./archive`` holds one made by an older release, whose
    default root that was: the store is not silently started afresh
    beside it. The message says how to keep using it.
    """
    layout = Layout(Path(root))
    legacy = Layout(Path(absolute_path(LEGACY_DEFAULT_ROOT)))
    default = absolute_path(root) == absolute_path(DEFAULT_ROOT)
    if default and not layout.root.exists() and legacy.db_path.is_file():
        raise StoreError(
            f"no store at {DEFAULT_ROOT}, the default root, but {LEGACY_DEFAULT_ROOT} holds a "
            "store made by an earlier release (whose default root it was); to keep using it "
            f"where it is, set `store: {{root: {LEGACY_DEFAULT_ROOT}}}` in the config (or pass "
            f"--root {LEGACY_DEFAULT_ROOT}); to start a new store instead, create "
            f"{DEFAULT_ROOT}/ first"
        )
    return layout


class Layout:
    """Paths of one store; creates nothing until :meth:`create` is called.

    ``layouts``: the directory function of each layout version (default
    :data:`LAYOUTS`, read when the object is made); :attr:`current` is the
    newest, the one new files are written in.
    """

    def __init__(self, root: Path, layouts: Sequence[Directory] | None = None) -> None:
        self.root = root
        self.layouts: tuple[Directory, ...] = tuple(LAYOUTS if layouts is None else layouts)
        #: (version, date) -> directory: a reader locates a file at every load.
        self._directories: dict[tuple[int, str | None], Path] = {}
        self.warcs = root / "warcs"
        self.incoming = root / "incoming"
        self.invalid = root / "invalid"
        self.db_path = root / "index.sqlite3"
        self.lock_path = root / "store.lock"
        self.writer_lock_path = root / "writer.lock"

    def create(self) -> None:
        """Create ``root``, ``warcs/`` and ``incoming/`` (parents included) if missing."""
        self.warcs.mkdir(parents=True, exist_ok=True)
        self.incoming.mkdir(exist_ok=True)

    def exists(self) -> bool:
        """True when ``root`` holds a store (its ``warcs/`` directory exists)."""
        return self.warcs.is_dir()

    @property
    def current(self) -> int:
        """The layout version new files are written in (the newest one)."""
        return len(self.layouts)

    def directory_of(self, fs_version: int, date: str | None = None) -> Path:
        """The directory of a file created at ``date`` under layout ``fs_version``.

        Raises :class:`StoreError` for a layout this release does not know
        (a row written by a newer release), or a date the layout needs and
        does not get.
        """
        key = (fs_version, date)
        found = self._directories.get(key)
        if found is not None:
            return found
        if not 1 <= fs_version <= len(self.layouts):
            raise StoreError(
                f"layout version {fs_version} is unknown to this release (it knows 1 to "
                f"{len(self.layouts)}): the store was written by a newer gateway; upgrade this one"
            )
        directory = self.layouts[fs_version - 1](self.warcs, date)
        if len(self._directories) >= _DIRECTORIES_KEPT:
            self._directories.clear()
        self._directories[key] = directory
        return directory

    def path_of(self, name: str, *, fs_version: int, date: str | None, open_: bool = False) -> Path:
        """The path of ``name`` created at ``date`` under layout ``fs_version``.

        ``open_``: the file is being written (``name.open``). Raises as
        :meth:`directory_of`.
        """
        return self.directory_of(fs_version, date) / (name + OPEN_SUFFIX if open_ else name)

    def place(self, file: Placed, *, open_: bool = False) -> Path:
        """Where ``file`` lives: derived from its row alone (name, date, ``fs_version``).

        The one function that says where a file is; nothing is looked up on
        disk. Raises as :meth:`directory_of`.
        """
        return self.path_of(file.name, fs_version=file.fs_version, date=file.date, open_=open_)

    def candidates(self, file: Placed, *, open_: bool = False) -> list[Path]:
        """Where to look for ``file``, in order: its row's place, then every other layout's.

        The other layouts come newest first, each once; those needing a date
        the row lacks are left out. While a file moves it is in one of the
        first two (the row changes between the copy and the removal of the
        old one), so a reader that tries them in order finds it. Callers may
        append other places (replicas) after these.
        """
        out = [self.place(file, open_=open_)]
        for version in range(len(self.layouts), 0, -1):
            if version == file.fs_version:
                continue
            try:
                path = self.path_of(file.name, fs_version=version, date=file.date, open_=open_)
            except StoreError:
                continue
            if path not in out:
                out.append(path)
        return out

    def version_at(self, path: Path, date: str | None) -> int | None:
        """The newest layout version that puts a file of ``date`` at ``path``, else None."""
        for version in range(len(self.layouts), 0, -1):
            try:
                if self.directory_of(version, date) == path.parent:
                    return version
            except StoreError:
                continue
        return None

    def make_directory(self, directory: Path) -> None:
        """Create ``directory`` under ``warcs/`` and its missing parents, durably.

        Each directory created is made durable by an fsync of its parent, so
        a file linked into it survives a crash with the path that names it.
        """
        missing: list[Path] = []
        current = directory
        while not current.is_dir():
            missing.append(current)
            current = current.parent
        for path in reversed(missing):
            try:
                path.mkdir()
            except FileExistsError:
                continue  # another process made it meanwhile
            fsync_dir(path.parent)

    def walk(self) -> Iterator[Path]:
        """Every entry under ``warcs/`` that is not a directory, as it is read from disk.

        Streams (``os.scandir``, depth first, in the directories' own order):
        memory holds one directory iterator per level, never the listing.
        Symbolic links are yielded, not followed.
        """
        if not self.warcs.is_dir():
            return
        stack = [os.scandir(self.warcs)]
        try:
            while stack:
                entry = next(stack[-1], None)
                if entry is None:
                    stack.pop().close()
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(os.scandir(entry.path))
                else:
                    yield Path(entry.path)
        finally:
            for iterator in stack:
                iterator.close()

    def staging_path(self, name: str) -> Path:
        """Where ``store add`` copies ``name`` before it joins ``warcs/``."""
        return self.incoming / name

    @staticmethod
    def new_warc_name(prefix: str, serial: int, now: datetime | None = None) -> str:
        """``{prefix}-{YYYYMMDDhhmmss}-{serial:05d}.warc.gz`` for a new file (UTC)."""
        when = (now or datetime.now(UTC)).astimezone(UTC)
        return f"{prefix}-{when.strftime('%Y%m%d%H%M%S')}-{serial:05d}.warc.gz"

    @staticmethod
    def serial_of(name: str) -> int | None:
        """The serial number of a store-written name (``.open`` allowed), else None.

        >>> Layout.serial_of("gateway-20250301120000-00042.warc.gz.open")
        42
        >>> Layout.serial_of("gateway-20250301120000-00042-salvaged.warc.gz")
        42
        """
        match = _WRITTEN.search(name.removesuffix(OPEN_SUFFIX))
        return int(match.group(2)) if match else None

    def move_to_invalid(self, path: Path, now: datetime | None = None) -> Path:
        """Move ``path`` to ``invalid/YYYYMMDD/`` (a free name) and return the new path.

        Only for files the store wrote (callers check the row's origin).
        """
        day = (now or datetime.now(UTC)).astimezone(UTC).strftime("%Y%m%d")
        target_dir = self.invalid / day
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / path.name
        counter = 1
        while target.exists():
            counter += 1
            target = target_dir / f"{path.name}.{counter}"
        os.replace(path, target)
        fsync_dir(target_dir)
        fsync_dir(path.parent)
        return target


LockMode = Literal["exclusive", "shared"]


class StoreLock:
    """An ``flock`` on one lock file (``store.lock``, ``writer.lock``).

    :meth:`acquire` never waits: it raises :class:`StoreLocked` saying what
    to do (``hint``). A lock only ever taken exclusive (``exclusive_only``:
    ``writer.lock``) holds its holder's pid, which the message names; the
    others are never written to (``store check`` takes ``store.lock`` and
    changes nothing).
    """

    def __init__(self, path: Path, *, exclusive_only: bool = False) -> None:
        self.path = path
        self.exclusive_only = exclusive_only
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, mode: LockMode, *, hint: str = "") -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        flag = fcntl.LOCK_EX if mode == "exclusive" else fcntl.LOCK_SH
        try:
            fcntl.flock(fd, flag | fcntl.LOCK_NB)
        except OSError as exc:
            holder = ""
            try:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            who = f" (pid {holder})" if holder.isdigit() and self.exclusive_only else ""
            raise StoreLocked(
                f"the store at {self.path.parent} is in use by another process{who}"
                + (f"; {hint}" if hint else "")
            ) from exc
        if self.exclusive_only:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def try_acquire(self, mode: LockMode) -> bool:
        """Like :meth:`acquire`, but False instead of :class:`StoreLocked`."""
        try:
            self.acquire(mode)
        except StoreLocked:
            return False
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
