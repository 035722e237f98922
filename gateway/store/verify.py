"""Verify a WARC or ARC file: whole records (framing) and digests (warcio).

:func:`verify_file` is what ``store check`` and ``store add`` run on each
file: :func:`~gateway.store.framing.scan_frames` finds where the whole
records end, then warcio's ``ArchiveIterator(check_digests=True)`` (the
``warcio check`` logic) reads every whole record and checks its
``WARC-Block-Digest`` and ``WARC-Payload-Digest`` (ARC records carry none).
The warcio pass also lists each record's offset, length and identity, so
index entries can be compared with what is really in the file; ARC records
are read as warcio converts them to WARC (``arc2warc``), the way they are
indexed, with no record ID (warcio would invent a new one at every read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from gateway.store.framing import FramingError, file_format, scan_frames
from gateway.store.indexing import RangeReader, record_id_of

__all__ = [
    "STORE_SOFTWARE",
    "FileVerdict",
    "RecordInfo",
    "drain",
    "record_info",
    "record_problem",
    "verify_file",
    "written_by_store",
]

#: How the writer's warcinfo records begin their ``software`` field (every
#: release writes it): what tells a file the store wrote from any other.
STORE_SOFTWARE: Final = "archive-gateway/"

_CHUNK: Final = 1 << 16

#: ``progress(n)``: ``n`` more bytes were processed (what it returns is ignored;
#: a tqdm bar's ``update`` fits).
Progress = Callable[[int], object]


@dataclass(frozen=True, slots=True)
class RecordInfo:
    """One record as warcio read it."""

    offset: int
    length: int
    rec_type: str
    record_id: str
    url: str
    warc_date: str
    payload_digest: str
    refers_to: str
    content_type: str


@dataclass(slots=True)
class FileVerdict:
    """The result for one file.

    ``good_end``: end of the last whole record (framing); ``framing_error``:
    why the bytes after it are not a record (None when the file ends there);
    ``torn``: that error is a record cut short by the end of the file;
    ``bad_records``: offsets of records failing a digest (with reasons);
    ``notes``: what is odd but kept (an ARC file's last record shorter than
    its header says); ``arc``: the file is ARC.
    """

    size: int
    good_end: int = 0
    framing_error: str | None = None
    torn: bool = False
    arc: bool = False
    records: list[RecordInfo] = field(default_factory=list)
    bad_records: dict[int, str] = field(default_factory=dict)
    frame_ends: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.framing_error is None and not self.bad_records


def drain(stream: Any) -> None:
    """Read ``stream`` to its end (warcio checks digests as the payload is read)."""
    while stream.read(_CHUNK):
        pass


def record_info(record: Any, offset: int, length: int, *, arc: bool) -> RecordInfo:
    """The :class:`RecordInfo` of a warcio record read whole at ``[offset, offset + length)``."""
    headers = record.rec_headers
    return RecordInfo(
        offset=offset,
        length=length,
        rec_type=str(record.rec_type),
        record_id=record_id_of(record, arc=arc),
        url=headers.get_header("WARC-Target-URI") or "",
        warc_date=headers.get_header("WARC-Date") or "",
        payload_digest=headers.get_header("WARC-Payload-Digest") or "",
        refers_to=headers.get_header("WARC-Refers-To") or "",
        content_type=headers.get_header("Content-Type") or "",
    )


def verify_file(path: Path, *, progress: Progress | None = None) -> FileVerdict:
    """Verify ``path``; progress advances by twice the file size in total.

    Raises OSError when the file cannot be read at all.
    """
    advance = progress or (lambda n: None)
    with path.open("rb") as fh:
        size = fh.seek(0, 2)
        verdict = FileVerdict(size=size, arc=size > 0 and file_format(fh)[1])
        try:
            for frame in scan_frames(fh):
                verdict.good_end = frame.end
                verdict.frame_ends[frame.offset] = frame.end
                if frame.short_by:
                    verdict.notes.append(
                        f"offset {frame.offset}: the last ARC record has {frame.short_by} "
                        "bytes fewer than its header says (kept as it is)"
                    )
                advance(frame.length)
        except FramingError as exc:
            verdict.framing_error = str(exc)
            verdict.torn = exc.at_eof
        advance(size - verdict.good_end)
        done = 0
        try:
            iterator = ArchiveIterator(
                RangeReader(fh, 0, verdict.good_end), check_digests=True, arc2warc=True
            )
            for record in iterator:
                drain(record.raw_stream)
                offset = iterator.get_record_offset()
                length = iterator.get_record_length()
                checker = record.digest_checker
                if checker.passed is False:
                    verdict.bad_records[offset] = "; ".join(str(p) for p in checker.problems)
                verdict.records.append(record_info(record, offset, length, arc=verdict.arc))
                advance(offset + length - done)
                done = offset + length
        except ArchiveLoadFailed as exc:
            verdict.bad_records[done] = f"warcio cannot read the record: {exc}".strip()
        advance(size - done)
    return verdict


def record_problem(fh: IO[bytes], start: int, end: int) -> str | None:
    """warcio's digest check of the whole record at ``[start, end)``: why it fails, or None."""
    try:
        for record in ArchiveIterator(RangeReader(fh, start, end), check_digests=True):
            drain(record.raw_stream)
            checker = record.digest_checker
            if checker.passed is False:
                return "; ".join(str(p) for p in checker.problems)
    except ArchiveLoadFailed as exc:
        return f"warcio cannot read the record: {exc}".strip()
    return None


def written_by_store(path: Path) -> bool:
    """True when ``path`` is a file the store's writer wrote (blocking; reads its first record).

    The writer starts every file with a warcinfo record whose
    ``WARC-Filename`` is the file's name (without ``.open``) and whose
    ``software`` field begins with :data:`STORE_SOFTWARE`. Anything
    unreadable is not the store's.
    """
    name = path.name.removesuffix(".open")
    try:
        with path.open("rb") as fh:
            for record in ArchiveIterator(fh, arc2warc=False):
                if record.rec_type != "warcinfo":
                    return False
                if record.rec_headers.get_header("WARC-Filename") != name:
                    return False
                fields = record.raw_stream.read(1 << 16).decode("utf-8", "replace")
                return any(
                    line.partition(":")[0].strip() == "software"
                    and line.partition(":")[2].strip().startswith(STORE_SOFTWARE)
                    for line in fields.splitlines()
                )
    except (OSError, ArchiveLoadFailed, ValueError):
        return False
    return False
