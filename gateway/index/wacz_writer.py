"""Writing a WACZ 1.1.1 file front to back, into a stream that cannot seek.

WACZ 1.1.1 (Webrecorder, https://specs.webrecorder.net/wacz/1.1.1/) is a
ZIP file holding ``archive/`` (WARC files, stored uncompressed in the ZIP so
a record is a range read), ``indexes/`` (CDXJ), ``pages/pages.jsonl``,
``datapackage.json`` (every other file's ``path``, ``hash`` and ``bytes``:
Frictionless Data Package) and ``datapackage-digest.json`` (the SHA-256 of
``datapackage.json``).

:class:`WaczWriter` writes one entry after another and keeps the output in
memory only until :meth:`WaczWriter.take` hands it on, so a WACZ of any
size streams: each entry's SHA-256 and size are counted while it is
written, which lets ``datapackage.json`` (listing them) come after them in
the same pass; the central directory comes last. The ZIP itself is the
standard library's :mod:`zipfile` writing to a stream without ``seek``:
each entry's CRC-32 and sizes follow its data in a data descriptor (ZIP
APPNOTE 4.3.9) and stand in the central directory, where readers (py-wacz,
wabac.js, ``unzip``) take them from. The ``archive/`` entry is ZIP64 from
the start, its size being unknown when its header is written; the others
only when they need it.

An entry begun ZIP64 carries its ZIP64 extra field in its local header
only (the central directory needs one only past 4 GiB), so it also gets an
Info-ZIP extended timestamp (extra field ``0x5455``, its modification time),
written in both headers. wabac.js (ReplayWeb.page's reader, 2.x
``ZipRangeReader``) takes an entry's data to start at ``local header
offset + 30 + name length`` whenever the central directory gives the entry
no extra field, without reading the local header; with one, it reads the
local header's lengths, as APPNOTE 4.3.7 has readers do.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
import zipfile
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Final

__all__ = ["WACZ_VERSION", "WaczWriter"]

#: The version of the WACZ specification this writer follows.
WACZ_VERSION: Final = "1.1.1"
DATAPACKAGE: Final = "datapackage.json"
DATAPACKAGE_DIGEST: Final = "datapackage-digest.json"
#: Info-ZIP's extended timestamp extra field (APPNOTE 4.6.1, ID 0x5455).
_EXTENDED_TIMESTAMP: Final = 0x5455


class _Sink:
    """A write-only byte stream (no ``tell``, no ``seek``): zipfile streams into it."""

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.size = 0

    def write(self, data: bytes) -> int:
        self.pieces.append(bytes(data))
        self.size += len(data)
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class WaczWriter:
    """A WACZ file written entry by entry; the bytes come out through :meth:`take`.

    Use: :meth:`begin` an entry, :meth:`write` its bytes, :meth:`end` it (or
    :meth:`add` a whole one), for the ``archive/`` WARC first; then
    :meth:`finish` writes ``datapackage.json``, ``datapackage-digest.json``
    and the central directory. ``created`` (UTC) dates the entries and the
    package. Not thread-safe: one call at a time (a caller may make each one
    in a worker thread).
    """

    def __init__(self, created: datetime | None = None) -> None:
        self.created = created or datetime.now(UTC)
        self._sink = _Sink()
        self._zip = zipfile.ZipFile(self._sink, "w", allowZip64=True)
        self._entry: IO[bytes] | None = None
        self._path = ""
        self._hash = hashlib.sha256()
        self._bytes = 0
        #: Each written entry as a datapackage resource: name, path, hash, bytes.
        self.resources: list[dict[str, str | int]] = []

    @property
    def entry_bytes(self) -> int:
        """Bytes written so far into the entry begun last (an offset within it)."""
        return self._bytes

    def _info(self, path: str, deflate: bool) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(path, date_time=self.created.timetuple()[:6])
        info.compress_type = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
        info.external_attr = 0o644 << 16
        return info

    def begin(self, path: str, *, deflate: bool = False, size: int | None = None) -> None:
        """Start the entry ``path`` (stored; ``deflate`` compresses it, never for
        ``archive/``: WACZ 1.1.1 requires WARCs stored). ``size``: its length when
        known; an entry of unknown length is ZIP64 (it may pass 4 GiB)."""
        if self._entry is not None:
            raise RuntimeError(f"entry {self._path} is still open")
        if deflate and path.startswith("archive/"):
            raise ValueError(f"{path}: WACZ archive/ entries are stored, not deflated")
        info = self._info(path, deflate)
        info.file_size = size or 0
        if size is None:  # an extra field in the central directory too (module docstring)
            mtime = int(self.created.timestamp()) & 0xFFFFFFFF
            info.extra = struct.pack("<HHBI", _EXTENDED_TIMESTAMP, 5, 1, mtime)
        self._entry = self._zip.open(info, "w", force_zip64=size is None)
        self._path = path
        self._hash = hashlib.sha256()
        self._bytes = 0

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data`` to the open entry (hashed as it goes)."""
        if self._entry is None:
            raise RuntimeError("no entry is open")
        self._entry.write(data)
        self._hash.update(data)
        self._bytes += len(data)

    def end(self) -> None:
        """Close the open entry and list it as a resource."""
        if self._entry is None:
            raise RuntimeError("no entry is open")
        self._entry.close()
        self._entry = None
        self.resources.append(
            {
                "name": self._path.rsplit("/", 1)[-1].lower(),
                "path": self._path,
                "hash": f"sha256:{self._hash.hexdigest()}",
                "bytes": self._bytes,
            }
        )

    def add(self, path: str, data: bytes, *, deflate: bool = True) -> None:
        """Write the whole entry ``path`` at once (deflated unless told otherwise)."""
        self.begin(path, deflate=deflate, size=len(data))
        self.write(data)
        self.end()

    def finish(self, metadata: Mapping[str, object]) -> None:
        """Write ``datapackage.json`` (``metadata`` merged into it), its digest, and
        the central directory; nothing can be added after.

        The package holds ``profile: data-package``, every entry written so far
        in ``resources`` (in order), ``wacz_version``, ``created`` (ISO 8601, UTC,
        seconds) and what ``metadata`` adds (``software``, ``title``...).
        """
        package: dict[str, object] = {
            "profile": "data-package",
            "resources": self.resources,
            "wacz_version": WACZ_VERSION,
            "created": self.created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            **metadata,
        }
        package_bytes = json.dumps(package, indent=2).encode("utf-8")
        self._zip.writestr(self._info(DATAPACKAGE, True), package_bytes)
        digest = {
            "path": DATAPACKAGE,
            "hash": f"sha256:{hashlib.sha256(package_bytes).hexdigest()}",
        }
        self._zip.writestr(self._info(DATAPACKAGE_DIGEST, True), json.dumps(digest, indent=2))
        self._zip.close()

    def discard(self) -> None:
        """Give up: close what is open and drop what was not taken (the bytes
        taken so far are not a WACZ). Nothing can be written after.

        Called after a failure or a cancellation, possibly while a write
        handed to a worker thread is still running: what closing then raises
        about the entry's state is beside the point and not raised.
        """
        entry, self._entry = self._entry, None
        with contextlib.suppress(ValueError, OSError):
            if entry is not None:
                entry.close()
            self._zip.close()
        self.take()

    @property
    def pending_bytes(self) -> int:
        """Bytes written and not yet taken."""
        return self._sink.size

    def take(self) -> bytes:
        """The bytes written since the last call, in order (the WACZ is their concatenation)."""
        data = b"".join(self._sink.pieces)
        self._sink.pieces.clear()
        self._sink.size = 0
        return data
