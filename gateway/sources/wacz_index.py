"""The indexes of one opened WACZ, searched as the CDXJ and ZipNum sources search theirs.

WACZ 1.1.1 §indexes: ``indexes/`` holds either plain sorted CDXJ
(``*.cdx``, ``*.cdxj``, possibly gzipped) or the compressed form py-wacz and
browsertrix-crawler write: a ZipNum shard ``index.cdx.gz`` (gzip members of
sorted CDXJ lines) with its summary ``index.idx``. The summary is either
cdxj-indexer's ``cdxj-gzip-1.0`` form (a ``!meta 0 {"format": ..., "filename":
"index.cdx.gz"}`` line, then ``urlkey timestamp {"offset": N, "length": N,
"digest": ...}`` per block) or pywb's tab-separated ZipNum summary.

How each is read (as wabac.js reads them):

- a plain index, and a ZipNum summary, are read whole from the ZIP once,
  when the WACZ is opened, into an anonymous in-memory file
  (``memfd_create``) and searched with the CDXJ file source's binary search
  (:func:`~gateway.sources.cdxj_scan.scan_file`,
  :func:`~gateway.sources.zipnum_blocks.summary_lines`);
- ZipNum blocks are range-read from the shard entry, which must be stored
  (uncompressed in the ZIP), run of adjacent blocks by run, and inflated by
  :func:`~gateway.sources.zipnum_blocks.inflate_block`.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from typing import Final

from warcio.timeutils import iso_date_to_timestamp

from gateway.cdx.cdxj import CdxFormatError, CdxRecord
from gateway.cdx.cdxops import LocalScan, merge_sorted
from gateway.errors import ArchiveRefused, LoadError, SourceBadAnswer, SourceUnavailable
from gateway.loaders.wacz_archive import WaczArchive, ZipEntry, read_range
from gateway.sources.base import Page
from gateway.sources.cdxj_scan import CDX_HEADERS, GZIP_MAGIC, Handle, scan_file
from gateway.sources.zipnum import SUMMARY_SUFFIXES
from gateway.sources.zipnum_blocks import inflate_block, summary_lines

__all__ = ["WaczIndex", "load_index", "parse_pages", "read_pages"]

_PLAIN_SUFFIXES: Final = (".cdx", ".cdxj", ".cdx.gz", ".cdxj.gz")
#: Adjacent blocks of a shard read in one range request (pywb's ``max_blocks``).
_MAX_BLOCKS: Final = 10


@dataclass(frozen=True, slots=True)
class _Block:
    part: str
    offset: int
    length: int


@dataclass(slots=True)
class _Summary:
    """A ZipNum summary in memory and the shard its blocks live in by default."""

    handle: Handle
    default_part: str


class WaczIndex:
    """The searchable indexes of one :class:`WaczArchive` (module docstring).

    :meth:`lookup` yields records in ``[key, end)`` by (urlkey, timestamp),
    each tagged with ``source`` = the archive's label. Raises
    :class:`SourceBadAnswer` for an unparseable line or block,
    :class:`SourceUnavailable` when a block cannot be read.
    """

    def __init__(
        self, archive: WaczArchive, plain: list[Handle], summaries: list[_Summary], *, source: str
    ) -> None:
        self.archive = archive
        self.source = source
        self._plain = plain
        self._summaries = summaries

    def lookup(self, key: bytes, end: bytes) -> AsyncGenerator[CdxRecord, None]:
        streams = [self._plain_records(handle, key, end) for handle in self._plain]
        streams += [self._zipnum_records(summary, key, end) for summary in self._summaries]
        return merge_sorted(streams)

    async def _plain_records(
        self, handle: Handle, key: bytes, end: bytes
    ) -> AsyncGenerator[CdxRecord, None]:
        label = self.archive.label
        handle.users += 1
        try:
            scan = scan_file(handle, key, end, source=self.source, label=label)
            async for record in LocalScan(scan):
                yield record
        finally:
            handle.release()

    async def _zipnum_records(
        self, summary: _Summary, key: bytes, end: bytes
    ) -> AsyncGenerator[CdxRecord, None]:
        # The blocks are listed first (the summary is in memory), then read run by run.
        summary.handle.users += 1
        try:
            blocks = list(self._blocks(summary, key, end))
        finally:
            summary.handle.release()
        run: list[_Block] = []
        for block in blocks:
            if run and not (
                len(run) < _MAX_BLOCKS
                and block.part == run[-1].part
                and block.offset == run[-1].offset + run[-1].length
            ):
                for record in await self._run_records(run, key, end):
                    yield record
                run = []
            run.append(block)
        if run:
            for record in await self._run_records(run, key, end):
                yield record

    def _blocks(self, summary: _Summary, key: bytes, end: bytes) -> Generator[_Block, None, None]:
        try:
            for line in summary_lines(summary.handle, key, end):
                block = self._block(line, summary.default_part)
                if block is not None:
                    yield block
        except ValueError as exc:
            raise SourceBadAnswer(
                self.source, f"WACZ {self.archive.label}: {summary.handle.path}: {exc}"
            ) from exc

    def _block(self, line: bytes, default_part: str) -> _Block | None:
        """A summary line as a block; None for the ``!meta`` header line."""
        if line.startswith(b"!meta"):
            return None
        try:
            if b"\t" in line:
                fields = line.rstrip(b"\r\n").split(b"\t")
                return _Block(fields[1].decode("utf-8"), int(fields[2]), int(fields[3]))
            data = json.loads(line[line.index(b"{") :])
            part = data.get("filename", default_part)
            return _Block(str(part), int(data["offset"]), int(data["length"]))
        except (IndexError, KeyError, ValueError, TypeError, UnicodeDecodeError):
            shown = line[:200].decode("utf-8", "replace")
            raise SourceBadAnswer(
                self.source,
                f"WACZ {self.archive.label}: summary line {shown!r} is neither "
                '\'urlkey timestamp {"offset": N, "length": N}\' nor a tab-separated ZipNum line',
            ) from None

    async def _run_records(self, run: list[_Block], key: bytes, end: bytes) -> list[CdxRecord]:
        """The records in ``[key, end)`` of a run of adjacent blocks of one shard."""
        archive = self.archive
        part = run[0].part
        try:
            entry = _shard_entry(archive, part)
            start = await archive.data_offset(entry)
            total = sum(block.length for block in run)
            if run[0].offset + total > entry.size:
                raise ArchiveRefused(
                    f"WACZ {archive.label}: block at offset {run[-1].offset} lies past the end "
                    f"of indexes/{part}",
                    {archive.label: f"indexes/{part}: short"},
                )
            data = await read_range(archive.location, start + run[0].offset, total, archive.session)
        except LoadError as exc:
            raise SourceUnavailable(self.source, exc.message) from exc
        records: list[CdxRecord] = []
        at = 0
        for block in run:
            member = data[at : at + block.length]
            at += block.length
            for line in inflate_block(member, source=self.source, part=part, offset=block.offset):
                if line < key or line.startswith(CDX_HEADERS):
                    continue
                if line >= end:
                    return records
                try:
                    record = CdxRecord.parse(line)
                except CdxFormatError as exc:
                    raise SourceBadAnswer(
                        self.source, f"WACZ {archive.label}: indexes/{part}: {exc}"
                    ) from exc
                record.set_source(archive.label)
                records.append(record)
        return records

    def close(self) -> None:
        """Close the in-memory files (after the lookups still reading them finish)."""
        for handle in self._plain:
            handle.retire()
        for summary in self._summaries:
            summary.handle.retire()
        self._plain, self._summaries = [], []


def _shard_entry(archive: WaczArchive, part: str) -> ZipEntry:
    entry = archive.entry(f"indexes/{part}")
    if not entry.stored:
        raise ArchiveRefused(
            f"WACZ {archive.label}: indexes/{part} is compressed in the ZIP; WACZ 1.1.1 "
            "stores a compressed index uncompressed (ZIP STORE) so it can be range-read",
            {archive.label: f"indexes/{part}: not stored"},
        )
    return entry


async def load_index(archive: WaczArchive, *, source: str) -> WaczIndex:
    """Read ``archive``'s index files (module docstring) into a :class:`WaczIndex`.

    A ``.cdx.gz`` named by a summary's ``!meta`` or lines is a shard, read by
    range; any other index file is read whole. Raises :class:`ArchiveRefused`
    when there is no index under ``indexes/``, :class:`LoadError` when reading fails.
    """
    names = sorted(name for name in archive.entries if name.startswith("indexes/"))
    summaries: list[_Summary] = []
    shards: set[str] = set()
    plain: list[Handle] = []
    try:
        for name in names:
            if name.endswith(SUMMARY_SUFFIXES):
                data = await archive.read_entry(name)
                default = _meta_filename(data) or os.path.basename(name)[: -len(".idx")] + ".cdx.gz"
                shards.add(f"indexes/{default}")
                shards.update(f"indexes/{part}" for part in _named_parts(data))
                summaries.append(_Summary(_memory_handle(f"{archive.label}!{name}", data), default))
        for name in names:
            if name.endswith(_PLAIN_SUFFIXES) and name not in shards:
                data = await archive.read_entry(name)
                plain.append(_memory_handle(f"{archive.label}!{name}", data))
    except BaseException:
        for handle in plain + [summary.handle for summary in summaries]:
            handle.retire()
        raise
    if not plain and not summaries:
        raise ArchiveRefused(
            f"WACZ {archive.label}: no index under indexes/ (expected index.cdx.gz with "
            "index.idx, or a .cdxj file)",
            {archive.label: "no index"},
        )
    return WaczIndex(archive, plain, summaries, source=source)


def _meta_filename(summary: bytes) -> str | None:
    """The shard name of a ``cdxj-gzip-1.0`` summary's ``!meta`` line.

    >>> _meta_filename(b'!meta 0 {"format": "cdxj-gzip-1.0", "filename": "index.cdx.gz"}\\n')
    'index.cdx.gz'
    """
    if not summary.startswith(b"!meta"):
        return None
    first = summary.split(b"\n", 1)[0]
    try:
        name = json.loads(first[first.index(b"{") :]).get("filename")
    except (ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def _named_parts(summary: bytes) -> set[str]:
    """Shard names a tab-separated summary's lines give (its second field)."""
    parts = set()
    for line in summary.splitlines():
        if b"\t" in line:
            fields = line.split(b"\t")
            parts.add(fields[1].decode("utf-8", "replace"))
    return parts


def _memory_handle(label: str, data: bytes) -> Handle:
    """An anonymous in-memory file holding ``data``, as a search :class:`Handle`."""
    fd = os.memfd_create("wacz-index", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    except BaseException:
        os.close(fd)
        raise
    return Handle(label, fd, (0, fd, 0, len(data)), data.startswith(GZIP_MAGIC))


#: The page list of a WACZ (WACZ 1.1.1 §pages; ReplayWeb.page lists it).
PAGES_ENTRY: Final = "pages/pages.jsonl"


async def read_pages(archive: WaczArchive) -> list[Page]:
    """The pages of ``archive``'s ``pages/pages.jsonl`` (none without one); LoadError."""
    if PAGES_ENTRY not in archive.entries:
        return []
    return parse_pages(await archive.read_entry(PAGES_ENTRY), origin=archive.label)


def parse_pages(data: bytes, *, origin: str) -> list[Page]:
    """Pages of a ``json-pages-1.0`` list: a header line, then one JSON object per page
    with ``url``, ``ts`` (ISO 8601 or 14 digits) and an optional ``title``. Lines
    that are not such an object are skipped.

    >>> header = b'{"format": "json-pages-1.0", "id": "pages"}\\n'
    >>> page = b'{"url": "http://a.org/", "ts": "2014-01-26T20:06:24Z"}'
    >>> parse_pages(header + page, origin="x.wacz")
    [Page(url='http://a.org/', title='', timestamp='20140126200624', origin='x.wacz')]
    """
    pages = []
    for line in data.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or "format" in entry:
            continue
        url, ts = entry.get("url"), str(entry.get("ts", ""))
        if not isinstance(url, str) or not url:
            continue
        try:
            timestamp = ts if ts.isdigit() else iso_date_to_timestamp(ts)
        except ValueError:
            continue
        title = entry.get("title")
        pages.append(Page(url, title if isinstance(title, str) else "", timestamp, origin))
    return pages
