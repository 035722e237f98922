"""Write sorted CDXJ indexes of WARC and ARC files with cdxj-indexer.

The indexing itself is cdxj-indexer's (``CDXJIndexer`` with ``sort=True``), so
a line is what ``cdxj-indexer --sort --post-append`` and pywb's
``wb-manager reindex`` write (but for the digest fix below)::

    urlkey timestamp {"url": ..., "mime": ..., "status": ..., "digest": ...,
                      "length": ..., "offset": ..., "filename": ...}

- ``filename`` is the basename of the WARC/ARC file;
- ``digest`` is the payload digest as the WARC writer recorded it (or as
  warcio computes it, in SHA-1, when the record has none), with its algorithm
  prefix (``sha1:BASE32``); indexes written by older pywb versions, such as
  the sample archive's, drop the prefix;
- revisit records carry ``mime: warc/revisit`` and the status of their own
  HTTP header block (older pywb indexes omit ``status`` on revisits);
- with ``post_append`` (the default, as pywb indexes), the urlkey of a POST or
  PUT capture gets its method and request body appended as a query,
  ``org,httpbin)/post?__wb_method=post&foo=bar``, and the JSON block gains
  ``method`` and ``requestBody``, so that ``/{coll}/postreq`` lookups find it.

What this module adds is the boundary: inputs are checked before anything is
indexed, and warcio's failures become :class:`ValueError` naming the file. And
one fix: a record without a ``WARC-Payload-Digest`` header (every ARC record,
some WARC writers) gets its digest computed by warcio (``ensure_digest``) as it
comes off the archive iterator. cdxj-indexer 1.5.0 computes it only after
``post_append`` buffering has drained the record, and so writes the digest of
an empty payload (``sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ``) for every such
record; it also never closes the spool file the computation leaves behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import textwrap
import zlib
from collections import deque
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, BinaryIO, Final, TextIO, cast

from cdxj_indexer import CDXJIndexer, iter_file_or_dir
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.recordbuilder import RecordBuilder

__all__ = ["ARCHIVE_SUFFIXES", "IndexReport", "archive_files", "index_archives", "write_cdxj_index"]

logger = logging.getLogger(__name__)

#: File name endings indexed when an input is a directory (cdxj-indexer's list).
ARCHIVE_SUFFIXES: Final[tuple[str, ...]] = tuple(CDXJIndexer.ALLOWED_EXT)

_GZIP_MAGIC: Final = b"\x1f\x8b"
_WARC_MAGIC: Final = b"WARC/"
_ARC_MAGIC: Final = b"filedesc://"
_SNIFF_BYTES: Final = 64
_MAX_REASON_CHARS: Final = 400


class _LineSink:
    """The text stream cdxj-indexer writes to: counts lines, encodes for binary ``out``.

    Lines of the records in ``excluded`` (``{filename: {offset, ...}}``) are
    dropped: cdxj-indexer writes whole lines, one per call.
    """

    __slots__ = ("_binary", "_excluded", "_text", "lines")

    def __init__(self, out: BinaryIO | TextIO, excluded: dict[str, set[str]] | None = None) -> None:
        self._text: TextIO | None = None
        self._binary: BinaryIO | None = None
        if isinstance(out, io.TextIOBase) or _has_encoding(out):
            self._text = cast(TextIO, out)
        else:
            self._binary = cast(BinaryIO, out)
        self._excluded = excluded or {}
        self.lines = 0

    def write(self, data: str) -> int:
        if self._excluded and self._is_excluded(data):
            return len(data)
        self.lines += data.count("\n")
        if self._text is not None:
            return self._text.write(data)
        assert self._binary is not None
        return self._binary.write(data.encode("utf-8"))

    def _is_excluded(self, line: str) -> bool:
        try:
            block = json.loads(line.split(" ", 2)[2])
        except (IndexError, ValueError):
            return False
        offsets = self._excluded.get(str(block.get("filename", "")))
        return offsets is not None and str(block.get("offset", "")) in offsets

    def flush(self) -> None:
        if self._text is not None:
            self._text.flush()
        elif self._binary is not None:
            self._binary.flush()


class _DigestingRecords:
    """An ArchiveIterator whose indexed records carry ``WARC-Payload-Digest`` when yielded.

    warcio's ``ensure_digest`` reads the record's payload into a spool file that
    becomes ``record.raw_stream``; the spool is closed once the iterator has
    moved past the record (it reads a record to its end before the next one).
    :meth:`close` closes what the last records still hold open (their spool, and
    the ``buffered_stream`` cdxj-indexer's post_append buffering gave them) when
    indexing stops half-way through a file.
    """

    __slots__ = ("_position", "_recent", "_record_types", "_records", "done", "progress")

    def __init__(
        self,
        records: Any,
        record_types: Collection[str] | None,
        progress: Callable[[int], object] | None = None,
        position: Callable[[], int] = lambda: 0,
    ) -> None:
        self._records = records
        self._record_types = record_types
        #: Called with the bytes of the file read since the last call.
        self.progress = progress
        #: Where reading the file has got to (its ``tell``: it never consumes a
        #: record, unlike warcio's ``get_record_offset``, which would read the
        #: body that post_append still needs).
        self._position = position
        #: The file offset reported to ``progress`` so far.
        self.done = 0
        # (record, its ensure_digest spool) for the last records yielded:
        # cdxj-indexer's buffering holds back at most one record, so two suffice.
        self._recent: deque[tuple[Any, IO[bytes] | None]] = deque(maxlen=2)

    def get_record_offset(self) -> int:
        offset: int = self._records.get_record_offset()
        return offset

    def get_record_length(self) -> int:
        length: int = self._records.get_record_length()
        return length

    def __iter__(self) -> Iterator[Any]:
        for record in self._records:
            if self.progress is not None:
                offset = self._position()
                if offset > self.done:
                    self.progress(offset - self.done)
                    self.done = offset
            if self._recent:
                _, spool = self._recent[-1]
                if spool is not None:
                    spool.close()
            self._recent.append((record, self._ensure_digest(record)))
            yield record

    def _ensure_digest(self, record: Any) -> IO[bytes] | None:
        """Add WARC-Payload-Digest to an indexed record lacking it; return warcio's spool."""
        if self._record_types is not None and record.rec_type not in self._record_types:
            return None
        if record.rec_headers.get_header("WARC-Payload-Digest"):
            return None
        stream = record.raw_stream
        RecordBuilder().ensure_digest(record, block=False, payload=True)
        spool: IO[bytes] | None = record.raw_stream if record.raw_stream is not stream else None
        return spool

    def close(self) -> None:
        """Close the streams the last records hold (idempotent)."""
        for record, spool in self._recent:
            if spool is not None:
                spool.close()
            buffered = getattr(record, "buffered_stream", None)
            if buffered is not None:
                buffered.close()
        self._recent.clear()


class _Indexer(CDXJIndexer):  # type: ignore[misc]  # cdxj-indexer ships no types
    """cdxj-indexer, with payload digests computed before post_append buffering."""

    _records: _DigestingRecords | None = None
    #: ``progress(n)``: ``n`` more bytes of the input files were indexed.
    progress: Callable[[int], object] | None = None

    def _create_record_iter(self, input_: BinaryIO) -> _DigestingRecords:
        self._records = _DigestingRecords(
            super()._create_record_iter(input_), self.include_records, self.progress, input_.tell
        )
        return self._records

    def process_one(self, input_: BinaryIO, output: _LineSink, filename: str) -> None:
        try:
            super().process_one(input_, output, filename)
            if self.progress is not None:  # the last record, to the end of the file
                done = self._records.done if self._records is not None else 0
                self.progress(max(os.fstat(input_.fileno()).st_size - done, 0))
        finally:
            if self._records is not None:
                self._records.close()
                self._records = None


def _has_encoding(out: BinaryIO | TextIO) -> bool:
    """True for text streams that do not derive from io.TextIOBase (sys.stdout-likes)."""
    return getattr(out, "encoding", None) is not None


@dataclass(slots=True)
class IndexReport:
    """What :func:`index_archives` did: lines written and the problems met.

    ``problems`` holds one message per unreadable file (skipped) and per
    record left out (torn, its length not a number, or failing its digests), in input order;
    ``skipped`` the files left out whole.
    """

    lines: int = 0
    problems: list[str] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)


def index_archives(
    inputs: Sequence[Path],
    out: BinaryIO | TextIO,
    *,
    post_append: bool = True,
    strict: bool = False,
    progress: Callable[[int], object] | None = None,
) -> IndexReport:
    """Check, then index WARC/ARC files into one sorted CDXJ index (``gateway index``).

    Every file is read once with warcio before it is indexed, its digests
    checked as ``warcio check`` checks them (WARC-Block-Digest and
    WARC-Payload-Digest, where the record has them):

    - a file that cannot be read (not WARC or ARC, a gzip that is not one
      member per record, a record warcio cannot parse) is reported and
      skipped whole;
    - a record that ends before its declared length (a torn last record, a
      file cut short), whose length is not a number (``-1``, ``abc``) or
      that fails its digests is reported and left out of the index; the
      file's other records are indexed.

    With ``strict`` the first problem raises :class:`ValueError` before
    anything is written to ``out``. Otherwise ``out`` receives the index of
    everything that could be read and the report lists the rest. Raises
    ValueError for an input that does not exist (nothing is written).

    ``progress(n)`` is called as ``n`` more bytes are read, in both passes
    (twice the inputs' sizes on disk in all; a
    :func:`gateway.progress.progress_bar`'s ``update``).
    """
    files = archive_files(inputs)
    report = IndexReport()
    readable: list[Path] = []
    excluded: dict[str, set[str]] = {}
    for path in files:
        try:
            _check_archive_start(path)
            offsets, problems = _verify_records(path, progress)
        except ValueError as exc:
            if strict:
                raise
            report.problems.append(f"{exc}; skipped")
            report.skipped.append(path)
            if progress is not None:  # the indexing pass does not read it
                progress(path.stat().st_size)
            continue
        if problems and strict:
            raise ValueError(problems[0])
        report.problems.extend(problems)
        if offsets:
            excluded.setdefault(path.name, set()).update(offsets)
        readable.append(path)
    if readable:
        report.lines = _index(
            readable, out, post_append=post_append, excluded=excluded, progress=progress
        )
    return report


def _verify_records(
    path: Path, progress: Callable[[int], object] | None = None
) -> tuple[set[str], list[str]]:
    """Read every record of ``path`` to its end, digests checked (warcio).

    Returns the offsets (as index lines write them) of the records to leave
    out and one message per problem. Raises ValueError naming the file when
    warcio cannot read it. warcio's own warnings to stderr (a record not
    followed by a blank line) are kept out of the output. ``progress(n)``:
    ``n`` more bytes of the file were read (its size in all, also when it
    turns out unreadable part way).
    """
    offsets: set[str] = set()
    problems: list[str] = []
    done = 0
    try:
        with path.open("rb") as fh, contextlib.redirect_stderr(io.StringIO()):
            records = ArchiveIterator(fh, check_digests=True)
            for record in records:
                stream = record.raw_stream
                while stream.read(1 << 20):
                    pass
                offset = records.get_record_offset()
                # An ARC record may declare more than it holds (a writer that
                # counted its URL percent-encoded): served as it is, not torn.
                left = 0 if record.format.startswith("arc") else getattr(stream, "limit", 0)
                where = f"{path}: record at offset {offset} ({record.rec_type})"
                unframed = _framing_problem(record)
                if unframed:
                    offsets.add(str(offset))
                    problems.append(f"{where} {unframed}; not indexed")
                elif left:
                    offsets.add(str(offset))
                    problems.append(
                        f"{where} is torn: it ends {left} bytes before its declared length; "
                        "not indexed"
                    )
                elif record.digest_checker.passed is False:
                    offsets.add(str(offset))
                    failed = "; ".join(record.digest_checker.problems)[:_MAX_REASON_CHARS]
                    problems.append(f"{where} fails its digests ({failed}); not indexed")
                if progress is not None and fh.tell() > done:
                    progress(fh.tell() - done)
                    done = fh.tell()
    except (ArchiveLoadFailed, zlib.error, EOFError) as exc:
        raise ValueError(
            f"{path}: cannot read this WARC/ARC file: {_short_reason(str(exc))}"
        ) from exc
    finally:
        if progress is not None:
            progress(max(path.stat().st_size - done, 0))
    return offsets, problems


def _framing_problem(record: Any) -> str:
    """Why ``record``'s end cannot be found from its header, or ``""``.

    warcio reads a length that is not digits (``-1``, ``abc``: warcio's own
    ``bad.arc``) as an empty block and goes on; the gateway never serves such a
    record (:mod:`gateway.loaders.warc_reader`), so it is not indexed either.
    """
    name = "length" if record.format == "arc" else "Content-Length"
    declared = record.rec_headers.get_header(name)
    if declared is None:
        return "has no Content-Length" if record.format == "warc" else ""
    if declared.isascii() and declared.isdigit():
        return ""
    return f"has a length of {declared[:40]!r}, not a number of bytes: where it ends cannot be read"


def write_cdxj_index(
    inputs: Sequence[Path],
    out: BinaryIO | TextIO,
    *,
    post_append: bool = True,
    progress: Callable[[int], object] | None = None,
) -> int:
    """Index WARC/ARC files into one sorted CDXJ index written to ``out``.

    ``inputs`` are WARC or ARC files, plain or gzipped (one gzip member per
    record), or directories, searched recursively for files ending in
    :data:`ARCHIVE_SUFFIXES`. ``out`` is a text stream, or a binary stream that
    receives UTF-8. Lines are sorted by their text, i.e. by (urlkey, timestamp)
    ascending in byte order as pywb's binary search expects; identical lines
    (the same record given twice) are written once. An empty file is an
    archive with no records.

    ``progress(n)`` is called as ``n`` more bytes of the inputs are indexed
    (their sizes on disk in all; a :func:`gateway.progress.progress_bar`'s
    ``update``). Returns the number of lines written.

    Raises :class:`ValueError`, before anything is written to ``out``, if an
    input does not exist, is not a WARC or ARC file, or cannot be read to its
    end (the message names the file and, where warcio knows one, the fix:
    ``warcio recompress`` for a gzip that is not one member per record).
    """
    files = archive_files(inputs)
    for path in files:
        _check_archive_start(path)
    return _index(files, out, post_append=post_append, progress=progress)


def _index(
    files: Sequence[Path],
    out: BinaryIO | TextIO,
    *,
    post_append: bool,
    excluded: dict[str, set[str]] | None = None,
    progress: Callable[[int], object] | None = None,
) -> int:
    """cdxj-indexer over ``files`` into ``out``; the number of lines written."""
    by_name = {path.name: path for path in reversed(files)}
    sink = _LineSink(out, excluded)
    indexer = _Indexer(sink, [str(path) for path in files], post_append=post_append, sort=True)
    indexer.progress = progress
    try:
        indexer.process_all()
    except (ArchiveLoadFailed, zlib.error) as exc:
        _remove_sort_spills(indexer)
        current = by_name.get(indexer.curr_filename, indexer.curr_filename)
        reason = _short_reason(str(exc))
        raise ValueError(f"{current}: cannot index this WARC/ARC file: {reason}") from exc
    logger.debug("indexed %d files into %d CDXJ lines", len(files), sink.lines)
    return sink.lines


def archive_files(inputs: Sequence[Path]) -> list[Path]:
    """The files :func:`write_cdxj_index` reads: directories expanded (cdxj-indexer's walk).

    Raises :class:`ValueError` for an input that does not exist or is neither
    a regular file nor a directory.
    """
    for path in inputs:
        if not path.exists():
            raise ValueError(
                f"{path}: no such file or directory; expected a WARC or ARC file "
                f"({', '.join(ARCHIVE_SUFFIXES)}) or a directory of them"
            )
        if not (path.is_file() or path.is_dir()):
            raise ValueError(f"{path}: not a regular file or a directory")
    return [Path(name) for name in iter_file_or_dir([str(path) for path in inputs])]


def _check_archive_start(path: Path) -> None:
    """Raise ValueError unless ``path`` starts like a WARC (``WARC/``) or ARC (``filedesc://``).

    warcio accepts surprisingly much: a CDXJ file, for instance, reads as an ARC
    whose records are its lines. Looking at the first bytes (inside the first
    gzip member for a gzipped file) catches a wrong file before it is indexed.
    """
    with path.open("rb") as fh:
        head = fh.read(4096)
    if not head:
        return
    where = "it starts"
    if head.startswith(_GZIP_MAGIC):
        where = "its first gzip member starts"
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, _SNIFF_BYTES)
        except zlib.error as exc:
            raise ValueError(
                f"{path}: not a WARC or ARC file: it starts like a gzip file but does not "
                f"decompress ({exc}); expected a gzipped WARC/ARC with one member per record"
            ) from exc
    start = head.lstrip(b"\r\n")
    if start.startswith((_WARC_MAGIC, _ARC_MAGIC)):
        return
    raise ValueError(
        f"{path}: not a WARC or ARC file: {where} with {start[:24]!r}; "
        f"expected {_WARC_MAGIC!r} (WARC) or {_ARC_MAGIC!r} (ARC), plain or gzipped"
    )


def _short_reason(message: str) -> str:
    """warcio's message, dedented onto one paragraph and bounded in length."""
    reason = " ".join(textwrap.dedent(message).split())
    if len(reason) > _MAX_REASON_CHARS:
        reason = reason[:_MAX_REASON_CHARS] + "..."
    return reason


def _remove_sort_spills(indexer: _Indexer) -> None:
    """Delete the temporary files cdxj-indexer's SortingWriter spilled before failing."""
    for name in getattr(indexer.output, "tmp_files", ()):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)
