"""WACZ export: the captures of an Index API query, with their WARC records, as one WACZ.

What the file holds, in which order, and what happens to a capture whose
record cannot be loaded is documented in ``docs/wacz-export.md``; here is
how. :meth:`WaczExport.start` asks the collection exactly what the Index API
asks (:meth:`Collection.lookup <gateway.index.collection.Collection.lookup>`),
so whatever filters the Index API's captures filters the export's too.
:meth:`WaczExport.write` loads each capture's record with its step's loaders
(:func:`~gateway.index.collection.load_capture`: the Resource API's loaders,
breakers and load timeout) *as stored* (:attr:`LoadContext.as_stored
<gateway.loaders.base.LoadContext.as_stored>`), appends it to
``archive/data.warc.gz`` as its own gzip member (WARC 1.1 Annex D), follows a
revisit (WARC 1.1 §6.7) with its original
(:func:`~gateway.index.collection.original_finder`, as pywb's
``ResolvingLoader`` finds it), then writes the index, pages, log and
datapackage (:mod:`gateway.index.wacz_writer`). A record is written once
however many index lines name it; each line keeps its own.

A record's gzip member is held back until it is whole or
:data:`SPOOL_BYTES` long, so a record that breaks off while it is read can
still be skipped; past that, the :class:`~gateway.errors.LoadError` is
raised and the export fails rather than carry a torn record. ``admit`` (a
predicate over a capture) is the hook where a further decision (issue 22's
access rules) leaves a capture or an original out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import zlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from typing import Final

from warcio.timeutils import iso_date_to_timestamp, timestamp_to_iso_date

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery, parse_query
from gateway.errors import AccessBlocked, BadRequest, LoadError, NotFound
from gateway.index.collection import Collection, Step, load_capture, original_finder
from gateway.index.group import Lookup
from gateway.index.wacz_writer import WaczWriter
from gateway.loaders.base import LoadContext, LoadedRecord
from gateway.loaders.warc import EMPTY_DIGEST

__all__ = [
    "NOT_FOR_EXPORT",
    "SPOOL_BYTES",
    "WARC_NAME",
    "Admit",
    "ExportReport",
    "WaczExport",
    "parse_export_query",
]

logger = logging.getLogger(__name__)

#: The WARC entry's name in ``archive/`` (and the index lines' ``filename``).
WARC_NAME: Final = "data.warc.gz"
#: A record's gzip member is held back until it is whole or this large.
SPOOL_BYTES: Final = 8 * 1024 * 1024
#: Output is handed on in pieces of about this size.
_SEND_BYTES: Final = 256 * 1024
#: Pieces at least this large are compressed and hashed in a worker thread.
_THREAD_BYTES: Final = 64 * 1024
_PAGE_MIMES: Final = ("text/html", "application/xhtml+xml")
_RECORD_END: Final = b"\r\n\r\n"

#: ``admit(capture)``: False leaves the capture (or original) out of the export.
Admit = Callable[[CdxRecord], bool]
Send = Callable[[bytes], Awaitable[None]]


#: Index API parameters that shape the text of an answer, and how a revisit's
#: line reads: an export's index holds each record's whole CDXJ line as stored.
NOT_FOR_EXPORT: Final = ("output", "fl", "fields", "resolveRevisits")


def parse_export_query(params: Mapping[str, Sequence[str]]) -> CaptureQuery:
    """The Index API query of an export: :func:`~gateway.cdx.query.parse_query`'s
    parameters and checks, less :data:`NOT_FOR_EXPORT`.

    Raises :class:`~gateway.errors.BadRequest` (400) naming the parameter.

    >>> parse_export_query({"url": ["iana.org"], "matchType": ["prefix"]}).match_type
    'prefix'
    >>> parse_export_query({"url": ["iana.org"], "output": ["json"]})
    Traceback (most recent call last):
    gateway.errors.BadRequest: output: not taken by an export: its index holds whole CDXJ lines
    """
    for name in NOT_FOR_EXPORT:
        if name in params:
            what = "revisits are exported as stored" if name == "resolveRevisits" else ""
            raise BadRequest(
                name, f"not taken by an export: {what or 'its index holds whole CDXJ lines'}"
            )
    return parse_query(params)


@dataclass(slots=True)
class ExportReport:
    """What an export wrote: records of the query's ``captures``, ``originals`` of
    their revisits added, ``skipped`` captures (``{capture: why}``),
    ``unresolved`` revisits written without their original, captures ``refused``
    by ``admit``, and the WACZ's size in ``bytes``."""

    captures: int = 0
    originals: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    unresolved: dict[str, str] = field(default_factory=dict)
    refused: int = 0
    bytes: int = 0


def _name(capture: CdxRecord) -> str:
    return f"{capture.timestamp} {capture.url}"


def _key(capture: CdxRecord) -> tuple[str, str, int] | None:
    """A record's place in the collection, when it has one (WARC file and offset)."""
    offset = capture.offset
    if offset is None or not capture.filename or capture.filename == "-":
        return None
    return (capture.source, capture.filename, offset)


def _warc_header(block: bytes, name: str) -> str:
    """The value of header ``name`` in a WARC header block ('' when absent).

    >>> _warc_header(b"WARC/1.0\\r\\nWARC-Type: revisit\\r\\n\\r\\n", "warc-type")
    'revisit'
    """
    wanted = name.lower().encode("ascii") + b":"
    for line in block.split(b"\r\n")[1:]:
        if line.lower().startswith(wanted):
            return line[len(wanted) :].strip().decode("utf-8", "replace")
    return ""


def _placed_line(capture: CdxRecord, offset: int, length: int) -> str:
    """``capture``'s CDXJ line with its record at ``offset``/``length`` of ``data.warc.gz``
    (its other fields, in their order, unchanged)."""
    line = capture.copy()
    fields = dict(capture.fields)
    fields["offset"] = str(offset)
    fields["length"] = str(length)
    fields["filename"] = WARC_NAME
    line.fields = fields
    return line.to_cdxj()


def _software() -> str:
    try:
        return f"archive-gateway {version('archive-gateway')}"
    except PackageNotFoundError:
        return "archive-gateway"


class WaczExport:
    """One export: its lookup made by :meth:`start`, its WACZ written by :meth:`write`."""

    def __init__(
        self,
        collection: Collection,
        step: Step,
        answer: Lookup,
        query: CaptureQuery,
        admit: Admit | None,
        created: datetime,
    ) -> None:
        self.collection = collection
        self.step = step
        self.query = query
        self.report = ExportReport()
        self._answer = answer
        self._admit = admit
        self._zip = WaczWriter(created)
        self._find_original = original_finder(step)
        self._lines: list[str] = []
        self._pages: list[str] = []
        self._log: list[str] = []
        #: Where each record written lies in the WARC entry: ``(offset, length)``.
        self._placed: dict[tuple[str, str, int], tuple[int, int]] = {}
        #: The index lines of the records written as a revisit's original only.
        self._originals: dict[tuple[str, str, int], str] = {}
        self._spool: list[bytes] = []
        self._spooled = 0
        self._committed = False

    @classmethod
    async def start(
        cls,
        collection: Collection,
        query: CaptureQuery,
        *,
        admit: Admit | None = None,
        created: datetime | None = None,
    ) -> WaczExport:
        """Look ``query`` up as the Index API does; nothing is written yet.

        Raises what :meth:`Collection.lookup` raises (``AllSourcesFailed``:
        503; a source's refusal: 4xx) and :class:`~gateway.errors.NotFound`
        (404) when no capture matches: an empty export is refused, not sent.
        The caller must :meth:`write` or :meth:`aclose` the export.
        """
        step, answer = await collection.lookup(query)
        if step is None or answer.first is None:
            await answer.aclose()
            raise NotFound(
                f"no captures of {query.url} (matchType={query.match_type}) in collection "
                f"{collection.name!r} to export",
                answer.errors,
            )
        return cls(collection, step, answer, query, admit, created or datetime.now(UTC))

    @property
    def errors(self) -> dict[str, str]:
        """The lookup's per-source failures on a partial success (the ``ResErrors`` header)."""
        return self._answer.errors

    async def aclose(self) -> None:
        """Release the lookup (done by :meth:`write` too)."""
        await self._answer.aclose()

    async def write(
        self, send: Send, progress: Callable[[int], object] | None = None
    ) -> ExportReport:
        """Write the WACZ (see the module docstring) through ``send``, piece by piece.

        ``send(data)`` gets the file's bytes in order (about 256 KiB at a time);
        ``progress(1)`` is called after each capture of the answer. Raises
        what ``send`` raises (a client that left: ``ConnectionError``), and a
        :class:`~gateway.errors.LoadError` for a record that broke off after
        part of it was sent.
        """
        finished = False
        try:
            self._zip.begin(f"archive/{WARC_NAME}")
            async for capture in self._answer:
                await self._export_capture(capture)
                if progress is not None:
                    progress(1)
                if self._zip.pending_bytes >= _SEND_BYTES:
                    await self._send(send)
            self._zip.end()
            await asyncio.to_thread(self._finish)  # sorts and deflates the whole index
            finished = True
            await self._send(send)
        finally:
            if not finished:
                self._zip.discard()
            await self._answer.aclose()
        return self.report

    async def _send(self, send: Send) -> None:
        data = self._zip.take()
        if data:
            self.report.bytes += len(data)
            await send(data)

    def _context(self, capture: CdxRecord) -> LoadContext:
        return LoadContext(
            request_url=capture.url, find_original=self._find_original, as_stored=True
        )

    # ---------------------------------------------------------------- captures
    async def _export_capture(self, capture: CdxRecord) -> None:
        if self._admit is not None and not self._admit(capture):
            self.report.refused += 1
            return
        key = _key(capture)
        if key is not None and key in self._placed:
            self._index_again(capture, key)
            return
        try:
            loaded, errors = await load_capture(self.step, capture, self._context(capture))
        except AccessBlocked:  # the capture, or the original it needs, is blocked
            self.report.refused += 1
            return
        if loaded is None:
            self._skip(capture, "; ".join(errors.values()) or "no loader could load it")
            return
        try:
            failure = await self._write_record(capture, loaded)
            warc_headers = loaded.warc_headers
        finally:
            await loaded.aclose()
        if failure is not None:
            self._skip(capture, failure)
            return
        self.report.captures += 1
        self._add_page(capture)
        if _warc_header(warc_headers, "WARC-Type") == "revisit":
            await self._add_original(capture, warc_headers)

    def _skip(self, capture: CdxRecord, reason: str) -> None:
        name = _name(capture)
        self.report.skipped[name] = reason
        logger.warning("export of %s: capture %s skipped: %s", self.collection.name, name, reason)
        self._log_line("warn", "capture skipped: its record could not be loaded", capture, reason)

    def _log_line(
        self, level: str, message: str, capture: CdxRecord | None = None, reason: str = ""
    ) -> None:
        details: dict[str, object] = {}
        if capture is not None:
            details = {"url": capture.url, "timestamp": capture.timestamp, "reason": reason}
        line = {
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "logLevel": level,
            "context": "export",
            "message": message,
            "details": details,
        }
        self._log.append(json.dumps(line) + "\n")

    def _add_page(self, capture: CdxRecord) -> None:
        if capture.status != "200" or capture.mime.split(";")[0].strip() not in _PAGE_MIMES:
            return
        ts = timestamp_to_iso_date(capture.timestamp)
        page_id = hashlib.sha1(f"{ts} {capture.url}".encode(), usedforsecurity=False)
        page = {"id": page_id.hexdigest()[:24], "url": capture.url, "ts": ts}
        self._pages.append(json.dumps(page) + "\n")

    async def _add_original(self, revisit: CdxRecord, warc_headers: bytes) -> None:
        """Write the original of ``revisit`` unless it needs none or is written already."""
        digest = revisit.digest
        if revisit.status.startswith("3") or digest.rpartition(":")[2] == EMPTY_DIGEST:
            return  # pywb never loads a redirect's payload; an empty one needs no record
        url = _warc_header(warc_headers, "WARC-Refers-To-Target-URI") or revisit.url
        timestamp = revisit.timestamp
        with contextlib.suppress(ValueError):
            refers_date = _warc_header(warc_headers, "WARC-Refers-To-Date")
            timestamp = iso_date_to_timestamp(refers_date) if refers_date else timestamp
        failures: dict[str, str] = {}
        found = self._find_original(url, timestamp, digest)
        try:
            async for original in found:
                if await self._try_original(revisit, original, failures):
                    return
        except AccessBlocked:  # the original the revisit stands for is blocked
            self.report.refused += 1
            failures[url] = "its original is blocked by the access rules"
        finally:
            aclose = getattr(found, "aclose", None)
            if aclose is not None:
                await aclose()
        reason = "; ".join(failures.values()) or f"no capture of {url} with digest {digest}"
        self.report.unresolved[_name(revisit)] = reason
        logger.warning(
            "export of %s: revisit %s written without its original: %s",
            self.collection.name,
            _name(revisit),
            reason,
        )
        self._log_line("warn", "revisit written without its original", revisit, reason)

    async def _try_original(
        self, revisit: CdxRecord, original: CdxRecord, failures: dict[str, str]
    ) -> bool:
        """True when ``original`` is in the export now (written before or just now)."""
        key = _key(original)
        if key is not None and key == _key(revisit):
            return False
        if key is not None and key in self._placed:
            return True
        if self._admit is not None and not self._admit(original):
            self.report.refused += 1
            failures[_name(original)] = "left out by the access rules"
            return False
        try:
            loaded, errors = await load_capture(self.step, original, self._context(original))
        except AccessBlocked:
            self.report.refused += 1
            failures[_name(original)] = "left out by the access rules"
            return False
        if loaded is None:
            failures.update(errors)
            return False
        try:
            if _warc_header(loaded.warc_headers, "WARC-Type") == "revisit":
                failures[_name(original)] = "is itself a revisit record"
                return False
            failure = await self._write_record(original, loaded)
            if failure is not None:
                failures[_name(original)] = failure
                return False
        finally:
            await loaded.aclose()
        self.report.originals += 1
        if key is not None:
            self._originals[key] = self._lines[-1]
        return True

    # ----------------------------------------------------------------- records
    async def _write_record(self, capture: CdxRecord, loaded: LoadedRecord) -> str | None:
        """Append ``loaded`` as one gzip member and index it; None when done, else
        why nothing was written (the record broke off while still spooled)."""
        offset = self._zip.entry_bytes
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)  # a gzip member
        self._spool, self._spooled, self._committed = [], 0, False
        try:
            await self._emit(compressor, loaded.warc_headers + loaded.http_headers)
            whole = loaded.body_in_memory()
            if whole is not None:
                await self._emit(compressor, whole)
            else:
                async for chunk in loaded.body:
                    await self._emit(compressor, chunk)
            await self._put(compressor.compress(_RECORD_END) + compressor.flush())
        except LoadError as exc:
            if self._committed:
                raise  # part of the member is out: the WACZ must not look whole
            self._spool, self._spooled = [], 0
            return exc.message
        member_bytes = b"".join(self._spool)
        self._spool, self._spooled = [], 0
        await self._write(member_bytes)
        self._index(capture, offset, self._zip.entry_bytes - offset)
        return None

    async def _emit(self, compressor: zlib._Compress, data: bytes | memoryview) -> None:
        if len(data) >= _THREAD_BYTES:
            await self._put(await asyncio.to_thread(compressor.compress, data))
        else:
            await self._put(compressor.compress(data))

    async def _put(self, member_bytes: bytes) -> None:
        """Spool ``member_bytes``; past :data:`SPOOL_BYTES`, write through."""
        if not member_bytes:
            return
        if not self._committed:
            self._spool.append(member_bytes)
            self._spooled += len(member_bytes)
            if self._spooled < SPOOL_BYTES:
                return
            self._committed = True
            member_bytes = b"".join(self._spool)
            self._spool, self._spooled = [], 0
        await self._write(member_bytes)

    async def _write(self, member_bytes: bytes) -> None:
        """Into the WARC entry (hashed and CRC'd in a worker thread when large)."""
        if len(member_bytes) >= _THREAD_BYTES:
            await asyncio.to_thread(self._zip.write, member_bytes)
        elif member_bytes:
            self._zip.write(member_bytes)

    def _index(self, capture: CdxRecord, offset: int, length: int) -> None:
        self._lines.append(_placed_line(capture, offset, length))
        key = _key(capture)
        if key is not None:
            self._placed[key] = (offset, length)

    def _index_again(self, capture: CdxRecord, key: tuple[str, str, int]) -> None:
        """A capture of a record already written: its own line, pointing at that
        record (several index lines may name one record), unless it is the line
        written for it as a revisit's original, which now counts as the query's."""
        line = _placed_line(capture, *self._placed[key])
        if self._originals.pop(key, None) == line:
            self.report.originals -= 1
        else:
            self._lines.append(line)
        self.report.captures += 1
        self._add_page(capture)

    # ------------------------------------------------------------------ finish
    def _finish(self) -> None:
        """The index, pages, log and datapackage after the WARC entry."""
        report = self.report
        self._lines.sort()
        self._zip.add("indexes/index.cdx", "".join(self._lines).encode("utf-8"))
        header = {"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}
        pages = json.dumps(header) + "\n" + "".join(self._pages)
        self._zip.add("pages/pages.jsonl", pages.encode("utf-8"))
        summary = {
            "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "logLevel": "warn" if report.skipped or report.unresolved else "info",
            "context": "export",
            "message": "export done",
            "details": {
                "collection": self.collection.name,
                "url": self.query.url,
                "matchType": self.query.match_type,
                "captures": report.captures,
                "originals": report.originals,
                "skipped": len(report.skipped),
                "unresolved_revisits": len(report.unresolved),
                "refused": report.refused,
            },
        }
        self._log.append(json.dumps(summary) + "\n")
        self._zip.add("logs/export.log", "".join(self._log).encode("utf-8"))
        self._zip.finish(
            {
                "title": f"{self.collection.name}: {self.query.url} ({self.query.match_type})",
                "software": _software(),
            }
        )
