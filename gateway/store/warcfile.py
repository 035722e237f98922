"""One WARC file being written: append, truncate back, close.

Bytes go to the file through :class:`RecordSink`, an append-only buffer in
front of the raw file descriptor (``O_APPEND``) that warcio's
``WARCWriter`` writes gzip members into. :meth:`OpenWarc.begin` remembers
the offset before a capture; :meth:`OpenWarc.rollback` truncates back to it
when anything fails, so a failed write leaves no partial record behind.

Creating (:meth:`OpenWarc.create`): the file's row is committed first
(state ``open``, the current layout), then ``<name>.open`` is created
exclusively in that layout's directory (so closing it never moves it), so a crash in
between leaves a row for a missing file, which recovery drops, and never a
file the index does not know. A name taken in the index (an imported file)
or on disk (a file the store did not write) is skipped for the next serial.

The file's SHA-256 is kept up to date with its committed bytes
(:meth:`OpenWarc.hash_to`, read back after each index commit), so closing
does not read the file again.

Closing (:meth:`OpenWarc.close`): fsync the file, give it its final name by
a hard link, fsync the directory, mark it closed in the index with its
SHA-256 and ``open_link`` set, and only then remove the ``.open`` name (at
once, or after a grace period so that a reader holding a just-looked-up
``.open`` filename still finds it; the flag tells recovery to remove it if
the process dies first). Every method is blocking and runs in the writer's
thread.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Final

from warcio.warcwriter import WARCWriter

from gateway.store.db import IndexDB
from gateway.store.errors import StoreWriteError
from gateway.store.layout import Layout, date_of_name, fsync_dir
from gateway.store.rows import FileRow
from gateway.store.verify import STORE_SOFTWARE

__all__ = ["FaultInjector", "OpenWarc", "RecordSink"]

logger = logging.getLogger(__name__)

#: A test hook: called with a fault point name (``"write"``, ``"fsync"``,
#: ``"commit"``, ``"dedup_lookup"``) before or during that step; raising an
#: exception (e.g. ``OSError``) makes the step fail as a real I/O error would.
FaultInjector = Callable[[str], None]

_DRAIN_BYTES: Final = 1 << 20
_HASH_CHUNK: Final = 1 << 20
#: Serials tried past a taken name before creating a file gives up.
_NAME_ATTEMPTS: Final = 1000
SOFTWARE: Final = f"{STORE_SOFTWARE}0.1 snapshot store (warcio)"
_WARC_1_1: Final = "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"


def _no_fault(point: str) -> None:
    return None


class RecordSink:
    """A write-only, append-only file object over a raw descriptor.

    ``position`` counts every byte written through it (buffered or not), so
    it is the file offset where the next record starts. :meth:`drain` pushes
    the buffer to the file; warcio's ``flush`` after each record is a no-op,
    the writer drains once per capture.
    """

    def __init__(self, fd: int, position: int, inject: FaultInjector) -> None:
        self._fd = fd
        self._buffer = bytearray()
        self._inject = inject
        self.position = position

    def write(self, data: bytes) -> int:
        self._buffer += data
        self.position += len(data)
        if len(self._buffer) >= _DRAIN_BYTES:
            self.drain()
        return len(data)

    def flush(self) -> None:
        return None

    def drain(self) -> None:
        """Write the buffer to the file; raises OSError (or an injected fault)."""
        view = memoryview(self._buffer)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        del view
        self._buffer.clear()
        self._inject("write")


class OpenWarc:
    """The WARC file the writer appends to (``<name>.open`` on disk).

    ``size`` is the offset after the last whole record; ``captures`` counts
    the captures written into it; ``hashed`` is how far the SHA-256 covers.
    """

    def __init__(self, path: Path, file: FileRow, fd: int, size: int) -> None:
        self.open_path = path
        self.file = file
        self.fd = fd
        self.size = size
        self.captures = 0
        self.hashed = 0
        self._sha256 = hashlib.sha256()

    @property
    def name(self) -> str:
        """The closed name (``CDX filename`` once closed)."""
        return self.file.name

    @classmethod
    def create(
        cls,
        layout: Layout,
        db: IndexDB,
        *,
        prefix: str,
        durable: bool,
        inject: FaultInjector = _no_fault,
        now: datetime | None = None,
    ) -> OpenWarc:
        """Create the next ``<prefix>-<date>-<serial>.warc.gz.open`` with its warcinfo record.

        The serial is one above that of the newest file the writer created
        (from the index: no listing of ``warcs/``). Raises :class:`OSError` or
        :class:`sqlite3.Error` when the file or its row cannot be made, and
        :class:`StoreWriteError` when no free name is found.
        """
        first = 1
        for written in db.written_names():  # the newest with a serial
            last = Layout.serial_of(written)
            if last is not None:
                first = last + 1
                break
        for serial in range(first, first + _NAME_ATTEMPTS):
            name = layout.new_warc_name(prefix, serial, now)
            try:
                file = db.add_file(
                    name,
                    state="open",
                    origin="written",
                    fs_version=layout.current,
                    date=date_of_name(name),
                )
            except sqlite3.IntegrityError:
                continue  # an imported file has this name
            path = layout.place(file, open_=True)
            try:
                if any(p.exists() for p in layout.candidates(file)):
                    raise FileExistsError(name)
                layout.make_directory(path.parent)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
            except FileExistsError:
                logger.warning("store: %s exists but is not in the index; not touching it", path)
                db.remove_file(file.id)
                continue
            except BaseException:
                db.remove_file(file.id)
                raise
            return cls._start(path, file, fd, db, durable=durable, inject=inject)
        raise StoreWriteError(f"no free WARC file name after {name} in {layout.warcs}")

    @classmethod
    def _start(
        cls,
        path: Path,
        file: FileRow,
        fd: int,
        db: IndexDB,
        *,
        durable: bool,
        inject: FaultInjector,
    ) -> OpenWarc:
        warc = cls(path, file, fd, 0)
        try:
            sink = RecordSink(fd, 0, inject)
            writer = WARCWriter(sink, gzip=True, warc_version="1.1")
            info = {
                "software": SOFTWARE,
                "format": "WARC File Format 1.1",
                "conformsTo": _WARC_1_1,
            }
            writer.write_record(writer.create_warcinfo_record(file.name, info))
            sink.drain()
            if durable:
                os.fsync(fd)
                fsync_dir(path.parent)
            warc.size = sink.position
            db.append_rows(file.id, [], warc.size)
            warc.hash_to(warc.size)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            db.remove_file(file.id)
            raise
        logger.info("store: writing %s", path)
        return warc

    def sink(self, inject: FaultInjector) -> RecordSink:
        """A sink positioned at the end of the last whole record."""
        return RecordSink(self.fd, self.size, inject)

    def hash_to(self, end: int) -> None:
        """Extend the file's SHA-256 over its bytes up to ``end`` (read back from the file)."""
        while self.hashed < end:
            chunk = os.pread(self.fd, min(_HASH_CHUNK, end - self.hashed), self.hashed)
            if not chunk:
                raise OSError(f"{self.open_path}: ends at {self.hashed}, expected {end} bytes")
            self._sha256.update(chunk)
            self.hashed += len(chunk)

    def rollback(self, offset: int) -> None:
        """Truncate the file back to ``offset`` (before a failed capture or group).

        Raises OSError when even that fails; the caller then abandons the file
        (recovery truncates its torn tail at the next start).
        """
        os.ftruncate(self.fd, offset)
        self.size = offset
        if offset < self.hashed:  # never for committed bytes; start the digest again
            self._sha256 = hashlib.sha256()
            self.hashed = 0

    def abandon(self) -> None:
        """Stop using the file after an unrecoverable error; it stays ``.open``."""
        try:
            os.close(self.fd)
        except OSError:
            logger.exception("store: closing abandoned %s failed", self.open_path)
        logger.error(
            "store: abandoned %s after an I/O error; recovery will repair it at the next start",
            self.open_path,
        )

    def close(self, db: IndexDB, *, durable: bool) -> Path | None:
        """Close the file: fsync, link to the final name, fsync the directory, commit.

        A file without captures (only its warcinfo record) is deleted instead,
        then its row. Returns the ``.open`` path still to unlink (the caller
        removes it now or after a grace period, then clears ``open_link``),
        or None.
        """
        if self.captures == 0:
            os.close(self.fd)
            self.open_path.unlink(missing_ok=True)
            db.remove_file(self.file.id)
            return None
        if durable:
            os.fsync(self.fd)
        self.hash_to(self.size)
        os.close(self.fd)
        final = self.open_path.with_name(self.file.name)
        os.link(self.open_path, final)
        fsync_dir(self.open_path.parent)
        db.close_file(self.file.id, sha256=self._sha256.hexdigest(), open_link=True)
        logger.info("store: closed %s (%d bytes)", final, self.size)
        return self.open_path


def remove_open_link(db: IndexDB, file: FileRow, path: Path) -> None:
    """Remove the ``.open`` name kept by :meth:`OpenWarc.close`, then clear ``open_link``.

    The name is removed only while it is a second link of the closed file
    (the same inode), so nothing else is ever deleted.
    """
    final = path.with_name(file.name)
    try:
        same = os.path.samefile(path, final)
    except FileNotFoundError:
        same = False
    if same:
        path.unlink()
        fsync_dir(path.parent)
    elif path.exists():
        logger.error("store: %s is not a name of %s; leaving it in place", path, final)
    db.clear_open_link(file.id)
