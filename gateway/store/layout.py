"""The store's directory layout, WARC file names and the store lock.

::

    <root>/
      store.lock                 flock: exclusive for a writer (gateway,
                                 repair), shared for `store check`
      jobs.lock                  flock: the serving process that runs the jobs
      index.sqlite3              the capture index and dedup index (WAL mode),
                                 and the background jobs' tables
      incoming/                  online imports: verified copies waiting to
                                 be linked into warcs/ (``<id>-<name>.part``)
      warcs/                     every WARC file; CDX ``filename`` values are
                                 relative to this directory (the WARC prefix)
        gateway-20250301120000-00001.warc.gz        closed
        gateway-20250301130000-00002.warc.gz.open   being written
        example.warc.gz                             imported by `store add`
        example.warc.gz.importing                   import in progress
      invalid/YYYYMMDD/          unreadable files moved away by recovery/repair

Names written by the store: ``{prefix}-{YYYYMMDDhhmmss}-{serial:05d}.warc.gz``
(UTC creation time; serial one above the highest in ``warcs/``), with the
suffix ``.open`` until the file is closed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from gateway.store.errors import StoreLocked

__all__ = [
    "IMPORTING_SUFFIX",
    "OPEN_SUFFIX",
    "Layout",
    "StoreLock",
    "fsync_dir",
    "is_warc_name",
]

OPEN_SUFFIX: Final = ".open"
IMPORTING_SUFFIX: Final = ".importing"
WARC_EXTENSIONS: Final = (".warc.gz", ".warc")
_SERIAL = re.compile(r"-\d{14}-(\d{5,})\.warc\.gz$")


def is_warc_name(name: str) -> bool:
    """True for a closed WARC file name (``.warc.gz`` or ``.warc``), not hidden.

    >>> is_warc_name("a.warc.gz"), is_warc_name("a.warc.gz.open"), is_warc_name(".x.warc")
    (True, False, False)
    """
    return not name.startswith(".") and name.endswith(WARC_EXTENSIONS)


def fsync_dir(path: Path) -> None:
    """fsync a directory so that renames and new names in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Layout:
    """Paths of one store; creates nothing until :meth:`create` is called."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.warcs = root / "warcs"
        self.invalid = root / "invalid"
        self.db_path = root / "index.sqlite3"
        self.lock_path = root / "store.lock"

    def create(self) -> None:
        """Create ``root`` and ``warcs/`` (parents included) if missing."""
        self.warcs.mkdir(parents=True, exist_ok=True)

    def exists(self) -> bool:
        """True when ``root`` holds a store (its ``warcs/`` directory exists)."""
        return self.warcs.is_dir()

    def new_warc_name(self, prefix: str, serial: int, now: datetime | None = None) -> str:
        """``{prefix}-{YYYYMMDDhhmmss}-{serial:05d}.warc.gz`` for a new file (UTC)."""
        when = (now or datetime.now(UTC)).astimezone(UTC)
        return f"{prefix}-{when.strftime('%Y%m%d%H%M%S')}-{serial:05d}.warc.gz"

    @staticmethod
    def serial_of(name: str) -> int | None:
        """The serial number of a store-written name (``.open`` allowed), else None.

        >>> Layout.serial_of("gateway-20250301120000-00042.warc.gz.open")
        42
        """
        match = _SERIAL.search(name.removesuffix(OPEN_SUFFIX))
        return int(match.group(1)) if match else None

    def next_serial(self, known_names: list[str]) -> int:
        """One above the highest serial among ``known_names`` and ``warcs/``."""
        names = list(known_names)
        if self.warcs.is_dir():
            names.extend(os.listdir(self.warcs))
        serials = [s for s in map(self.serial_of, names) if s is not None]
        return max(serials, default=0) + 1

    def move_to_invalid(self, path: Path, now: datetime | None = None) -> Path:
        """Move ``path`` to ``invalid/YYYYMMDD/`` (a free name) and return the new path."""
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


class StoreLock:
    """An ``flock`` on ``store.lock``: exclusive for writers, shared for readers.

    :meth:`acquire` raises :class:`StoreLocked` (naming the holder's pid when
    it wrote one) instead of waiting.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, mode: Literal["exclusive", "shared"]) -> None:
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
            who = f" (last writer: pid {holder})" if holder else ""
            raise StoreLocked(
                f"the store at {self.path.parent} is in use by another process{who}; "
                "stop that process (the gateway, `store add` or `store repair`) and retry"
            ) from exc
        if mode == "exclusive":
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def try_acquire(self, mode: Literal["exclusive", "shared"]) -> bool:
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
