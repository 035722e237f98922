"""Verify a WARC file: whole records (framing) and digests (warcio).

:func:`verify_file` is what ``store check`` and ``store add`` run on each
file: :func:`~gateway.store.framing.scan_frames` finds where the whole
records end, then warcio's ``ArchiveIterator(check_digests=True)`` (the
``warcio check`` logic) reads every whole record and checks its
``WARC-Block-Digest`` and ``WARC-Payload-Digest``. The warcio pass also lists
each record's offset, length and identity, so index entries can be compared
with what is really in the file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from gateway.store.framing import FramingError, scan_frames
from gateway.store.indexing import RangeReader

__all__ = ["FileVerdict", "RecordInfo", "drain", "record_info", "verify_file"]

_CHUNK: Final = 1 << 16

#: ``progress(n)``: ``n`` more bytes were processed.
Progress = Callable[[int], None]


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
    ``bad_records``: offsets of records failing a digest (with reasons).
    """

    size: int
    good_end: int = 0
    framing_error: str | None = None
    torn: bool = False
    records: list[RecordInfo] = field(default_factory=list)
    bad_records: dict[int, str] = field(default_factory=dict)
    frame_ends: dict[int, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.framing_error is None and not self.bad_records


def drain(stream: Any) -> None:
    """Read ``stream`` to its end (warcio checks digests as the payload is read)."""
    while stream.read(_CHUNK):
        pass


def record_info(record: Any, offset: int, length: int) -> RecordInfo:
    """The :class:`RecordInfo` of a warcio record read whole at ``[offset, offset + length)``."""
    headers = record.rec_headers
    return RecordInfo(
        offset=offset,
        length=length,
        rec_type=str(record.rec_type),
        record_id=headers.get_header("WARC-Record-ID") or "",
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
        verdict = FileVerdict(size=size)
        try:
            for frame in scan_frames(fh):
                verdict.good_end = frame.end
                verdict.frame_ends[frame.offset] = frame.end
                advance(frame.length)
        except FramingError as exc:
            verdict.framing_error = str(exc)
            verdict.torn = exc.at_eof
        advance(size - verdict.good_end)
        done = 0
        try:
            iterator = ArchiveIterator(
                RangeReader(fh, 0, verdict.good_end), check_digests=True, arc2warc=False
            )
            for record in iterator:
                drain(record.raw_stream)
                offset = iterator.get_record_offset()
                length = iterator.get_record_length()
                checker = record.digest_checker
                if checker.passed is False:
                    verdict.bad_records[offset] = "; ".join(str(p) for p in checker.problems)
                verdict.records.append(record_info(record, offset, length))
                advance(offset + length - done)
                done = offset + length
        except ArchiveLoadFailed as exc:
            verdict.bad_records[done] = f"warcio cannot read the record: {exc}".strip()
        advance(size - done)
    return verdict
