"""A WACZ file read in place: its ZIP directory, ``datapackage.json``, its entries.

WACZ 1.1.1 (https://specs.webrecorder.net/wacz/1.1.1/) packages WARCs, CDXJ
indexes and page lists in one ZIP. Its processing model, followed here as
py-wacz and wabac.js read it:

1. read the ZIP's end of central directory and central directory (the last
   bytes of the file; ZIP64 included), through :mod:`zipfile` over a window
   of those bytes, so only the tail of a remote file is fetched;
2. read ``datapackage.json`` (its ``resources``: ``path``, ``hash``
   ``sha256:HEX``, ``bytes``) and ``datapackage-digest.json`` (the hash of
   ``datapackage.json``, and a ``signedData`` block when signed);
3. search the indexes under ``indexes/`` and range-read records from the
   ``archive/*.warc(.gz)`` entries, which WACZ stores uncompressed in the
   ZIP: a record is the bytes at (entry data offset + CDX offset).

Nothing is unpacked or copied to disk. A WACZ is read from a
:data:`~gateway.loaders.warc_sources.Location` (a local path, an
``http(s)://`` URL read with ``Range`` requests, or an object of a storage),
by :func:`~gateway.loaders.warc_sources.open_source`, the reader of every WARC
loader.

Integrity (:meth:`WaczArchive.verify`): every resource listed in
``datapackage.json`` must be in the ZIP, have its listed size and hash, and
``datapackage.json`` the hash in ``datapackage-digest.json``. It reads the
whole file once; hashing runs in a worker thread. The signature of a signed
WACZ is verified with authsign when that optional package is installed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import struct
import sys
import zipfile
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gateway.errors import (
    ArchiveFileNotFound,
    ArchiveRefused,
    ArchiveUnavailable,
    LoadError,
    PlaceUnreachable,
)
from gateway.loaders.warc_sources import Location, open_source

if TYPE_CHECKING:
    import aiohttp

__all__ = ["WaczArchive", "ZipEntry", "open_wacz", "read_range"]

#: The bytes read from the end first: the end of central directory record with
#: the longest ZIP comment, the ZIP64 locator and the ZIP64 end record.
_TAIL_BYTES: Final = 65536 + 22 + 20 + 56
#: Chunk of a whole-entry read (hashing, in-memory entries).
_CHUNK_BYTES: Final = 1024 * 1024
#: Largest entry read into memory (``datapackage.json``, an index, a page list).
MAX_ENTRY_BYTES: Final = 512 * 1024 * 1024
_LOCAL_HEADER: Final = struct.Struct("<4s2B4HL2L2H")
_LOCAL_SIGNATURE: Final = b"PK\x03\x04"
Session = Callable[[], "aiohttp.ClientSession"]


@dataclass(frozen=True, slots=True)
class ZipEntry:
    """One member of the ZIP: where its data starts, its sizes, stored or deflated."""

    name: str
    header_offset: int
    compressed_size: int
    size: int
    stored: bool
    deflated: bool


@dataclass(slots=True, kw_only=True)
class WaczArchive:
    """An opened WACZ: its place, its entries by name, its datapackage.

    ``label`` names it in messages (the path, URL or object name as configured).
    """

    label: str
    location: Location
    size: int
    entries: dict[str, ZipEntry]
    datapackage: dict[str, Any]
    datapackage_bytes: bytes
    digest: dict[str, Any] | None
    session: Session
    _data_offsets: dict[str, int] = field(default_factory=dict)

    # ------------------------------------------------------------- reading
    def entry(self, name: str) -> ZipEntry:
        """The entry ``name``; raises :class:`ArchiveRefused` when the ZIP lacks it."""
        entry = self.entries.get(name)
        if entry is None:
            raise ArchiveRefused(
                f"WACZ {self.label}: no entry {name!r} in the ZIP", {self.label: f"no {name}"}
            )
        return entry

    async def data_offset(self, entry: ZipEntry) -> int:
        """The offset of ``entry``'s data in the file (after its local header)."""
        known = self._data_offsets.get(entry.name)
        if known is not None:
            return known
        header = await read_range(self.location, entry.header_offset, 30, self.session)
        fields = _LOCAL_HEADER.unpack(header) if len(header) == 30 else None
        if fields is None or fields[0] != _LOCAL_SIGNATURE:
            raise ArchiveRefused(
                f"WACZ {self.label}: entry {entry.name!r} has no local header at byte "
                f"{entry.header_offset}; the ZIP is damaged",
                {self.label: f"{entry.name}: bad local header"},
            )
        offset: int = entry.header_offset + 30 + int(fields[10]) + int(fields[11])
        self._data_offsets[entry.name] = offset
        return offset

    async def read_entry(self, name: str) -> bytes:
        """The whole (inflated) content of entry ``name``, up to 512 MiB.

        Raises :class:`ArchiveRefused` for a missing, oversized, corrupt or
        unsupported-compression entry, :class:`LoadError` when reading fails.
        """
        entry = self.entry(name)
        if entry.size > MAX_ENTRY_BYTES:
            raise ArchiveRefused(
                f"WACZ {self.label}: entry {name!r} is {entry.size} bytes; at most "
                f"{MAX_ENTRY_BYTES} are read into memory",
                {self.label: f"{name}: too large"},
            )
        parts = [chunk async for chunk in self.iter_entry(entry)]
        return b"".join(parts)

    async def iter_entry(self, entry: ZipEntry) -> AsyncIterator[bytes]:
        """The content of ``entry`` in chunks of up to 1 MiB, inflated when it is
        deflated; a local file is read in a worker thread, never on the event loop."""
        if not (entry.stored or entry.deflated):
            raise ArchiveRefused(
                f"WACZ {self.label}: entry {entry.name!r} uses a ZIP compression other than "
                "store or deflate",
                {self.label: f"{entry.name}: unsupported compression"},
            )
        start = await self.data_offset(entry)
        inflater = zlib.decompressobj(-zlib.MAX_WBITS) if entry.deflated else None
        raw = await open_source(self.location, start, entry.compressed_size, self.session)
        try:
            left = entry.compressed_size
            blocking = raw.read_blocking  # a local file: read in a worker thread
            produced = 0
            while left > 0:
                size = min(_CHUNK_BYTES, left)
                if blocking is not None:
                    chunk = await asyncio.to_thread(blocking, size)
                else:
                    chunk = await raw.read(size)
                if not chunk:
                    raise ArchiveRefused(
                        f"WACZ {self.label}: entry {entry.name!r} is cut short",
                        {self.label: f"{entry.name}: truncated"},
                    )
                left -= len(chunk)
                if inflater is None:
                    yield chunk
                    continue
                room = entry.size - produced
                try:
                    out = inflater.decompress(chunk, room + 1)  # never past the stated size
                except zlib.error as exc:
                    raise ArchiveRefused(
                        f"WACZ {self.label}: entry {entry.name!r} does not inflate ({exc})",
                        {self.label: f"{entry.name}: corrupt"},
                    ) from exc
                if len(out) > room:
                    raise ArchiveRefused(
                        f"WACZ {self.label}: entry {entry.name!r} inflates past the "
                        f"{entry.size} bytes its ZIP header states",
                        {self.label: f"{entry.name}: inflates past its size"},
                    )
                produced += len(out)
                yield out
        finally:
            raw.close()

    # ------------------------------------------------------------- integrity
    async def verify(self) -> list[str]:
        """Check every resource of ``datapackage.json`` and the datapackage digest.

        Returns notes for what was not verified (no ``datapackage-digest.json``,
        a signature). Raises :class:`ArchiveRefused` naming the file and the
        first resource that is missing or whose size or hash differs.
        """
        notes: list[str] = []
        if self.digest is None:
            notes.append("no datapackage-digest.json: datapackage.json itself is not verified")
        else:
            expected = str(self.digest.get("hash", ""))
            self._check_hash("datapackage.json", expected, [self.datapackage_bytes])
            signed = self.digest.get("signedData")
            if signed:
                notes.append(await self._verify_signature(signed, expected))
        resources = self.datapackage.get("resources")
        if not isinstance(resources, list):
            raise ArchiveRefused(
                f"WACZ {self.label}: datapackage.json has no 'resources' list",
                {self.label: "datapackage.json: no resources"},
            )
        for resource in resources:
            await self._verify_resource(resource)
        return notes

    async def _verify_resource(self, resource: object) -> None:
        if not isinstance(resource, dict) or not isinstance(resource.get("path"), str):
            raise ArchiveRefused(
                f"WACZ {self.label}: datapackage.json lists a resource without a path",
                {self.label: "datapackage.json: bad resource"},
            )
        path = resource["path"]
        entry = self.entries.get(path)
        if entry is None:
            raise self._mismatch(path, "listed in datapackage.json but not in the ZIP")
        expected_bytes = resource.get("bytes")
        if isinstance(expected_bytes, int) and expected_bytes != entry.size:
            problem = f"{entry.size} bytes, datapackage.json says {expected_bytes}"
            raise self._mismatch(path, problem)
        expected = str(resource.get("hash", ""))
        algorithm = _algorithm(expected)
        if algorithm is None:
            raise self._mismatch(path, f"hash {expected!r} is not 'sha256:HEX' or 'md5:HEX'")
        hasher = hashlib.new(algorithm)
        async for chunk in self.iter_entry(entry):
            await asyncio.to_thread(hasher.update, chunk)
        got = f"{algorithm}:{hasher.hexdigest()}"
        if got != expected:
            raise self._mismatch(path, f"hash {got}, datapackage.json says {expected}")

    async def _verify_signature(self, signed: object, expected: str) -> str:
        """Verify ``signedData`` with authsign (Webrecorder's verifier, the one py-wacz's
        ``validate --verify-auth`` runs; optional); returns the note to report.

        Raises :class:`ArchiveRefused` when the signature does not sign this
        datapackage or authsign rejects it. Without authsign, or under
        ``python -O`` (authsign's checks are ``assert`` statements), the
        signature is reported as not verified.
        """
        if not isinstance(signed, dict) or signed.get("hash") != expected:
            raise self._mismatch("datapackage-digest.json", "signedData signs another hash")
        try:
            from authsign.verifier import Verifier
        except ImportError:
            return (
                "signed; the signature is not verified: install the optional authsign "
                "package (pip install 'archive-gateway[wacz-signing]')"
            )
        if sys.flags.optimize:
            return "signed; the signature is not verified under python -O (authsign asserts)"
        try:
            verified = await asyncio.to_thread(Verifier(), signed)
        except (AssertionError, ValueError, TypeError, KeyError) as exc:
            reason = str(exc) or type(exc).__name__
            problem = f"signature rejected ({reason})"
            raise self._mismatch("datapackage-digest.json", problem) from exc
        observer = getattr(verified, "observer", "?")
        return f"signature verified: signed by {observer} at {getattr(verified, 'timestamp', '?')}"

    def _check_hash(self, path: str, expected: str, chunks: list[bytes]) -> None:
        algorithm = _algorithm(expected)
        if algorithm is None:
            raise self._mismatch(path, f"datapackage-digest.json hash {expected!r} is not usable")
        hasher = hashlib.new(algorithm)
        for chunk in chunks:
            hasher.update(chunk)
        got = f"{algorithm}:{hasher.hexdigest()}"
        if got != expected:
            raise self._mismatch(path, f"hash {got}, datapackage-digest.json says {expected}")

    def _mismatch(self, resource: str, problem: str) -> ArchiveRefused:
        return ArchiveRefused(
            f"WACZ {self.label}: resource {resource}: {problem}; the file is damaged or "
            "was changed after it was packaged, and is not served",
            {self.label: f"{resource}: {problem}"},
        )


def _algorithm(value: str) -> str | None:
    """``sha256`` for ``sha256:HEX`` (``md5`` too, as py-wacz allows); None otherwise.

    >>> _algorithm("sha256:00ff"), _algorithm("crc32:1")
    ('sha256', None)
    """
    algorithm, _, hexdigest = value.partition(":")
    return algorithm if algorithm in ("sha256", "md5") and hexdigest else None


# ------------------------------------------------------------------ opening
async def read_range(location: Location, offset: int, length: int, session: Session) -> bytes:
    """Exactly ``length`` bytes at ``offset`` of ``location`` (fewer at its end).

    Raises the :class:`LoadError` of :func:`~gateway.loaders.warc_sources.open_source`.
    """
    raw = await open_source(location, offset, length, session)
    try:
        parts: list[bytes] = []
        left = length
        while left > 0:
            chunk = await raw.read(left)
            if not chunk:
                break
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)
    finally:
        raw.close()


class _Outside(Exception):
    """zipfile asked for bytes before the window: fetch from ``offset`` and retry."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class _Window:
    """A read-only file object over the bytes ``[start, size)`` of a ``size``-byte file."""

    def __init__(self, size: int, start: int, data: bytes) -> None:
        self._size = size
        self._start = start
        self._data = data
        self._pos = 0

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._pos < self._start:
            raise _Outside(self._pos)
        at = self._pos - self._start
        data = self._data[at:] if n < 0 else self._data[at : at + n]
        self._pos += len(data)
        return data


def _central_directory(label: str, size: int, start: int, tail: bytes) -> dict[str, ZipEntry]:
    """Entries by name from the file's tail; raises _Outside or ArchiveRefused."""
    try:
        with zipfile.ZipFile(_Window(size, start, tail)) as zf:
            infos = zf.infolist()
    except zipfile.BadZipFile as exc:
        raise ArchiveRefused(
            f"WACZ {label}: not a ZIP file ({exc}); expected a WACZ 1.1.1 package",
            {label: "not a ZIP file"},
        ) from exc
    return {
        info.filename: ZipEntry(
            name=info.filename,
            header_offset=info.header_offset,
            compressed_size=info.compress_size,
            size=info.file_size,
            stored=info.compress_type == zipfile.ZIP_STORED,
            deflated=info.compress_type == zipfile.ZIP_DEFLATED,
        )
        for info in infos
        if not info.is_dir()
    }


async def location_size(location: Location, session: Session) -> int:
    """The size in bytes of the file at ``location``.

    A local path: ``os.stat``; a URL: a ``Range: bytes=0-0`` request, whose
    ``Content-Range`` total is the size (which also shows the server honours
    ranges); a storage object: its ``size()``. Raises :class:`LoadError`.
    """
    if isinstance(location, str) and location.startswith("/"):
        try:
            return os.stat(location).st_size
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ArchiveUnavailable(f"{location}: {reason}", {location: reason}) from exc
    if isinstance(location, str):
        return await _http_size(location, session())
    sized = getattr(location, "size", None)
    if sized is None:
        raise LoadError(f"{location}: size unknown", {str(location): "size unknown"})
    return int(await sized())


async def _http_size(url: str, session: aiohttp.ClientSession) -> int:
    """The total of the ``Content-Range`` of a ``Range: bytes=0-0`` answer (RFC 9110 §14.4)."""
    from aiohttp import ClientError  # loaded: the session exists
    from yarl import URL

    headers = {"Range": "bytes=0-0", "Accept-Encoding": "identity"}
    try:
        async with session.get(URL(url, encoded=True), headers=headers) as response:
            status, total = response.status, response.headers.get("Content-Range", "")
    except (ClientError, TimeoutError, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
        raise PlaceUnreachable(f"{url}: request failed: {reason}", {url: reason}) from exc
    if status in (404, 410):
        raise ArchiveFileNotFound(f"{url}: HTTP {status}", {url: f"HTTP {status}"})
    _, _, size = total.rpartition("/")
    if status != 206 or not size.isdigit():
        reason = f"HTTP {status} without a Content-Range size"
        raise LoadError(
            f"{url}: {reason} for a range request; serve the WACZ with range support",
            {url: reason},
        )
    return int(size)


async def open_wacz(location: Location, *, label: str, session: Session) -> WaczArchive:
    """Read the ZIP directory and the datapackage of the WACZ at ``location``.

    Raises :class:`ArchiveRefused` for a file that is not a WACZ (not a ZIP,
    no or unreadable ``datapackage.json``), :class:`LoadError` when reading fails.
    Does not verify digests (:meth:`WaczArchive.verify`).
    """
    size = await location_size(location, session)
    start = max(0, size - _TAIL_BYTES)
    tail = await read_range(location, start, size - start, session)
    for _ in range(3):
        try:
            entries = _central_directory(label, size, start, tail)
            break
        except _Outside as outside:
            start = outside.offset
            tail = await read_range(location, start, size - start, session)
    else:
        raise ArchiveRefused(f"WACZ {label}: cannot locate its ZIP directory", {label: "bad ZIP"})
    archive = WaczArchive(
        label=label,
        location=location,
        size=size,
        entries=entries,
        datapackage={},
        datapackage_bytes=b"",
        digest=None,
        session=session,
    )
    archive.datapackage_bytes = await archive.read_entry("datapackage.json")
    archive.datapackage = _json_object(label, "datapackage.json", archive.datapackage_bytes)
    if "datapackage-digest.json" in entries:
        raw = await archive.read_entry("datapackage-digest.json")
        archive.digest = _json_object(label, "datapackage-digest.json", raw)
    return archive


def _json_object(label: str, name: str, data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise ArchiveRefused(
            f"WACZ {label}: {name} is not JSON ({exc})", {label: f"{name}: not JSON"}
        ) from exc
    if not isinstance(value, dict):
        raise ArchiveRefused(f"WACZ {label}: {name} is not a JSON object", {label: name})
    return value
