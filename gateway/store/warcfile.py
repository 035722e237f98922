"""One WARC file being written: append, truncate back, close.

Bytes go to the file through :class:`RecordSink`, an append-only buffer in
front of the raw file descriptor (``O_APPEND``) that warcio's
``WARCWriter`` writes gzip members into. :meth:`OpenWarc.begin` remembers
the offset before a capture; :meth:`OpenWarc.rollback` truncates back to it
when anything fails, so a failed write leaves no partial record behind.

Closing (:meth:`OpenWarc.close`): fsync the file, give it its final name by
a hard link, fsync the directory, mark it closed in the index, and only then
remove the ``.open`` name (at once, or after a grace period so that a reader
holding a just-looked-up ``.open`` filename still finds it). Every method is
blocking and runs in the writer's thread.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final

from warcio.warcwriter import WARCWriter

from gateway.jobs.db import utcnow
from gateway.store.db import FileRow, IndexDB
from gateway.store.layout import OPEN_SUFFIX, fsync_dir
from gateway.store.scrub import write_scrub_object

__all__ = ["FaultInjector", "OpenWarc", "RecordSink"]

logger = logging.getLogger(__name__)

#: A test hook: called with a fault point name (``"write"``, ``"fsync"``,
#: ``"commit"``, ``"dedup_lookup"``) before or during that step; raising an
#: exception (e.g. ``OSError``) makes the step fail as a real I/O error would.
FaultInjector = Callable[[str], None]

_DRAIN_BYTES: Final = 1 << 20
SOFTWARE: Final = "archive-gateway/0.1 snapshot store (warcio)"
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
    the captures written into it.
    """

    def __init__(self, warc_dir: Path, file: FileRow, fd: int, size: int) -> None:
        self.warc_dir = warc_dir
        self.file = file
        self.fd = fd
        self.size = size
        self.captures = 0

    @property
    def name(self) -> str:
        """The closed name (``CDX filename`` once closed)."""
        return self.file.name

    @property
    def open_path(self) -> Path:
        return self.warc_dir / (self.file.name + OPEN_SUFFIX)

    @classmethod
    def create(
        cls,
        warc_dir: Path,
        name: str,
        db: IndexDB,
        *,
        durable: bool,
        inject: FaultInjector = _no_fault,
    ) -> OpenWarc:
        """Create ``<name>.open``, index it as an open file, write its warcinfo record.

        The index row comes first: a crash before the file exists leaves a
        row for a missing file, which recovery drops.
        """
        file = db.add_file(name, is_open=True, origin="written")
        path = warc_dir / (name + OPEN_SUFFIX)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        warc = cls(warc_dir, file, fd, 0)
        try:
            sink = RecordSink(fd, 0, inject)
            writer = WARCWriter(sink, gzip=True, warc_version="1.1")
            info = {
                "software": SOFTWARE,
                "format": "WARC File Format 1.1",
                "conformsTo": _WARC_1_1,
            }
            writer.write_record(writer.create_warcinfo_record(name, info))
            sink.drain()
            if durable:
                os.fsync(fd)
                fsync_dir(warc_dir)
            warc.size = sink.position
            db.append_rows(file.id, [], warc.size)
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

    def rollback(self, offset: int) -> None:
        """Truncate the file back to ``offset`` (before a failed capture or group).

        Raises OSError when even that fails; the caller then abandons the file
        (recovery truncates its torn tail at the next start).
        """
        os.ftruncate(self.fd, offset)
        self.size = offset

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
        """Close the file: fsync, link to the final name, fsync the directory.

        A file without captures (only its warcinfo record) is deleted instead.
        Returns the ``.open`` path still to unlink (the caller removes it now
        or after a grace period), or None.
        """
        if self.captures == 0:
            os.close(self.fd)
            self.open_path.unlink(missing_ok=True)
            db.remove_file(self.file.id)
            return None
        if durable:
            os.fsync(self.fd)
        os.close(self.fd)
        final = self.warc_dir / self.file.name
        os.link(self.open_path, final)
        fsync_dir(self.warc_dir)
        db.set_open(self.file.id, False)
        logger.info("store: closed %s (%d bytes)", final, self.size)
        try:  # its verification, by the scrub actor (gateway.store.scrub)
            write_scrub_object(db.conn, self.file.name, utcnow())
        except sqlite3.Error as exc:
            logger.warning(
                "store: scheduling the scrub of %s failed (%s); the next start schedules it",
                self.file.name,
                exc,
            )
        return self.open_path


def remove_open_link(path: Path) -> None:
    """Remove the ``.open`` name left by :meth:`OpenWarc.close` and fsync the directory."""
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)
