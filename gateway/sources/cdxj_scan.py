"""Reading sorted index files: open versions, binary search, line scans.

The reading half of :mod:`gateway.sources.cdxj_file` (which holds the
sources, their config and their descriptions).

A plain file is binary-searched in 8 KiB blocks exactly as pywb's
``binsearch_offset`` does, with ``os.pread`` on one file descriptor per file
(no shared seek position, so concurrent lookups never disturb each other).
An exact lookup reads about ``log2(size / 8 KiB)`` probes of ~1 KiB (the
top 255 probe results of each version of a file are remembered, as every
lookup's search starts with them) plus 16 KiB for the final linear step, in
which only the lines from the first one starting with the range's common
prefix are cut out, one ``find`` each (a few lines for an exact lookup). Long ranges are read
in chunks of up to 64 KiB and yielded record by record, never accumulated;
:func:`scan_file` yields ``None`` (a checkpoint) after every 64 KiB read, for the
consumer to give the event loop a turn.

Gzip-compressed files (detected by their magic bytes ``1f 8b``, whatever
their name) are decompressed from the start by every lookup, which stops at
the first line past the range.

:class:`IndexFile` keeps one :class:`Handle` (an open version) per path and
reopens the file when its identity (device, inode, mtime, size) changes, read
with ``os.stat`` at most once per ``stat_interval_s`` (every lookup when 0); a
retired handle is closed when its last lookup releases it.
"""

from __future__ import annotations

import functools
import heapq
import logging
import os
import stat
import time
import zlib
from collections.abc import Generator, Iterator
from typing import Final

from gateway.cdx.cdxj import CdxFormatError, CdxRecord
from gateway.errors import SourceBadAnswer, SourceUnavailable
from gateway.sources.range_memo import RANGE_RECORDS, Image, RangeMemo

__all__ = [
    "CDX_HEADERS",
    "GZIP_MAGIC",
    "MAX_READ_BYTES",
    "Handle",
    "IndexFile",
    "encode_key",
    "merge_scans",
    "scan_file",
    "search_offset",
    "unavailable",
]

logger = logging.getLogger(__name__)

#: Binary search granularity (pywb ``binsearch`` ``block_size``).
_BLOCK_BYTES: Final = 8192
#: First read of a binary-search probe; grown when a line is longer.
_PROBE_BYTES: Final = 1024
#: First read of the linear step after the binary search; then doubled up to the maximum.
_FIRST_READ_BYTES: Final = 2 * _BLOCK_BYTES
#: The first batches of lines of a linear step (2, then 8) are cut one ``find`` at a time.
_FIND_LINES: Final = 8
#: Largest read of the linear step (and of a file's head to describe it).
MAX_READ_BYTES: Final = 64 * 1024
#: Bytes read (or decompressed) between two event-loop checkpoints.
_CHECKPOINT_BYTES: Final = 64 * 1024
#: Largest decompressed piece produced from one gzip input chunk at a time.
_GZIP_OUT_BYTES: Final = 256 * 1024
#: The first bytes of a gzip member (RFC 1952).
GZIP_MAGIC: Final = b"\x1f\x8b"
#: How legacy CDX header lines start (skipped when scanning).
CDX_HEADERS: Final = (b" CDX", b"CDX ")


class Handle:
    """One open version of a file; closed once retired and no lookup uses it.

    ``probes`` remembers what the binary search found at block starts (see
    :func:`search_offset`): every lookup walks the same first levels of the
    search, so those reads are made once per version of the file.
    """

    __slots__ = ("fd", "gzip", "identity", "path", "probes", "retired", "size", "users", "warned")

    def __init__(self, path: str, fd: int, identity: tuple[int, int, int, int], gz: bool) -> None:
        self.path = path
        self.fd = fd
        self.identity = identity
        self.size = identity[3]
        self.gzip = gz
        self.users = 0
        self.retired = False
        self.warned = False
        self.probes: dict[int, tuple[bytes | None, bool]] = {}

    def release(self) -> None:
        self.users -= 1
        if self.retired and self.users == 0:
            os.close(self.fd)

    def retire(self) -> None:
        self.retired = True
        if self.users == 0:
            os.close(self.fd)


class IndexFile:
    """Keeps the current :class:`Handle` of one path, reopening it when the file changes.

    The file's identity is read (``os.stat``) by the first lookup after
    ``stat_interval_s`` seconds (``time.monotonic``) since the last read;
    lookups in between use the handle as it is, so a file replaced or
    appended to is seen within ``stat_interval_s`` (at once with 0). A
    failed ``stat`` (the file is gone) is not remembered: every lookup tries
    again until it succeeds.
    """

    __slots__ = ("_checked_until", "_closed", "_handle", "path", "source", "stat_interval_s")

    def __init__(self, path: str, source: str, stat_interval_s: float = 0.0) -> None:
        self.path = path
        self.source = source
        self.stat_interval_s = stat_interval_s
        self._handle: Handle | None = None
        self._closed = False
        self._checked_until = 0.0

    def acquire(self) -> Handle:
        """The handle for the file as it is now (or as it was at most
        ``stat_interval_s`` ago); pair with ``release()``.

        Raises OSError from the filesystem, SourceUnavailable after close().
        """
        handle = self._handle
        if handle is not None and self.stat_interval_s and time.monotonic() < self._checked_until:
            handle.users += 1
            return handle
        if self._closed:
            raise SourceUnavailable(self.source, f"index file {self.path} was closed")
        handle = self._current()
        if self.stat_interval_s:
            self._checked_until = time.monotonic() + self.stat_interval_s
        handle.users += 1
        return handle

    def current_identity(self) -> tuple[int, int, int, int]:
        """The identity of the file's version :meth:`acquire` would give now
        (read with ``os.stat`` only when ``stat_interval_s`` has passed).

        Raises what :meth:`acquire` raises.
        """
        handle = self._handle
        if handle is not None and self.stat_interval_s and time.monotonic() < self._checked_until:
            return handle.identity
        handle = self.acquire()
        handle.release()
        return handle.identity

    def _current(self) -> Handle:
        """The handle of the file as ``os.stat`` finds it now (opened anew if it changed)."""
        st = os.stat(self.path)
        identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        handle = self._handle
        if handle is None or handle.identity != identity:
            if not stat.S_ISREG(st.st_mode):
                raise IsADirectoryError(21, "not a regular file")
            fd = os.open(self.path, os.O_RDONLY)
            try:
                fst = os.fstat(fd)
                magic = os.pread(fd, 2, 0)
            except BaseException:
                os.close(fd)
                raise
            identity = (fst.st_dev, fst.st_ino, fst.st_mtime_ns, fst.st_size)
            if handle is not None:
                handle.retire()
            handle = self._handle = Handle(self.path, fd, identity, magic == GZIP_MAGIC)
        return handle

    def close(self) -> None:
        self._closed = True
        if self._handle is not None:
            self._handle.retire()
            self._handle = None


# ------------------------------------------------------------------ scanning
class _FormatProblem(Exception):
    """A chunk reader found bytes it cannot split into lines (gzip errors, huge lines)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


#: A line longer than this is reported as a bad answer instead of buffered.
_MAX_LINE_BYTES: Final = 16 * 1024 * 1024

#: (position of the first line, lines without their newline, bytes read for them);
#: the position is a byte offset for plain files, a 1-based line number for gzip.
_Chunk = tuple[int, list[bytes], int]


@functools.lru_cache(maxsize=4096)
def encode_key(key: str) -> bytes:
    """``key`` as index lines are compared with: UTF-8, lone surrogates kept.

    Memoized (the same keys come back with the same queries): ~0.5k
    instructions a key instead of ~1.1k for the encoding call.
    """
    return key.encode("utf-8", "surrogatepass")


def _common_prefix(first: bytes, second: bytes) -> bytes:
    """The longest common prefix: every key in ``[first, second)`` starts with it.

    >>> _common_prefix(b"org,iana)/", b"org,iana)/!"), _common_prefix(b"com,", b"com-")
    (b'org,iana)/', b'com')
    """
    if second.startswith(first):  # an exact lookup: the range is key .. key + "!"
        return first
    size = min(len(first), len(second))
    for index in range(size):
        if first[index] != second[index]:
            return first[:index]
    return first[:size]


def unavailable(source: str, path: str, exc: OSError) -> SourceUnavailable:
    if isinstance(exc, FileNotFoundError):
        reason = f"index file {path} does not exist; restore it or fix the configured path"
    else:
        reason = f"cannot read index file {path}: {exc.strerror or exc}"
    return SourceUnavailable(source, reason)


def _probe(fd: int, size: int, offset: int, need: int) -> tuple[bytes | None, bool]:
    """The first line that starts after the first newline at or after ``offset``.

    Returns ``(line, whole)``: the line may be cut after ``need`` bytes
    (enough to compare it with a key of that length), and ``whole`` says it
    was not. ``(None, True)`` when no line starts there before end of file.
    """
    length = _PROBE_BYTES
    while True:
        data = os.pread(fd, length, offset)
        eof = len(data) < length or offset + len(data) >= size
        newline = data.find(b"\n")
        if newline >= 0:
            start = newline + 1
            stop = data.find(b"\n", start)
            if stop >= 0:
                return data[start:stop], True
            if len(data) - start >= need or eof:
                return (data[start:], eof) if start < len(data) else (None, True)
        elif eof:
            return None, True
        length *= 4


#: Probe results kept per file version (the top of the search, which every lookup shares).
_PROBES_KEPT: Final = 255
#: Bytes of a probed line kept; a key that needs more of it probes again.
_PROBE_KEPT_BYTES: Final = 512


def search_offset(handle: Handle, key: bytes) -> int:
    """pywb ``binsearch_offset``: a block start at or before the first line >= ``key``.

    Every line up to the partial line at the returned offset sorts before
    ``key`` (in a sorted file). Costs ``log2(size / 8 KiB)`` probes, of
    which those at the top of the search (the same for every key) are
    answered from ``handle.probes`` after the first lookups.
    """
    fd, size, probes = handle.fd, handle.size, handle.probes
    need = len(key)
    lo, hi = 0, size // _BLOCK_BYTES
    while hi - lo > 1:
        mid = (lo + hi) // 2
        kept = probes.get(mid)
        if kept is not None and (kept[1] or len(kept[0] or b"") >= need):
            line = kept[0]
        else:
            line, whole = _probe(fd, size, mid * _BLOCK_BYTES, need)
            if len(probes) < _PROBES_KEPT or mid in probes:
                # A cut line still orders every key no longer than what is kept of it.
                if line is not None and len(line) > _PROBE_KEPT_BYTES:
                    probes[mid] = (line[:_PROBE_KEPT_BYTES], False)
                else:
                    probes[mid] = (line, whole)
        if line is not None and key > line:
            lo = mid
        else:
            hi = mid
    return lo * _BLOCK_BYTES


def _plain_chunks(handle: Handle, key: bytes, prefix: bytes) -> Generator[_Chunk, None, None]:
    """Lines from the first that starts with ``prefix`` at or after the
    binary-search block, in batches cut as they are needed.

    ``prefix`` is the common prefix of the range's bounds: every line of the
    range starts with it, so the lines before its first occurrence are never
    cut into objects. Reads start at 16 KiB and double up to 64 KiB. The
    first batches hold 2, then 8 lines, each found with ``bytes.find``
    (memchr) and sliced out, so an exact lookup cuts the two or three lines
    it needs (``bytes.split`` with a limit would compare every byte of them
    in a loop of its own and copy the unsplit rest of the read); a longer
    range then splits every complete line read so far at once.
    """
    fd, size = handle.fd, handle.size
    pos = search_offset(handle, key)
    buf = b""
    buf_start = pos  # file offset of buf[0]
    cursor = 0  # buf[cursor:] is not yet yielded
    length = _FIRST_READ_BYTES
    seeking = True
    line_start = pos == 0  # buf starts at the start of a line
    batch = 2
    while pos < size:
        # (Conditional expressions: min() parses its arguments as keywords, ~1k instructions.)
        data = os.pread(fd, length if length < size - pos else size - pos, pos)
        if not data:
            break  # truncated since it was opened; the next lookup reopens it
        pos += len(data)
        length = 2 * length if length < MAX_READ_BYTES // 2 else MAX_READ_BYTES
        if cursor:
            buf_start += cursor
            buf = buf[cursor:]
            cursor = 0
        buf = buf + data if buf else data
        at_eof = pos >= size
        if seeking:
            if line_start and buf.startswith(prefix):
                cursor = 0
            else:
                found = buf.find(b"\n" + prefix)
                if found < 0:
                    # No candidate yet: keep only the last, possibly partial, line.
                    cut = buf.rfind(b"\n") + 1
                    buf_start += cut
                    buf = buf[cut:]
                    line_start = line_start or cut > 0
                    if len(buf) > _MAX_LINE_BYTES:
                        raise _FormatProblem(f"byte {buf_start}", "line longer than 16 MiB")
                    continue
                cursor = found + 1
            seeking = False
        find = buf.find
        while True:
            begin = cursor
            lines: list[bytes] = []
            if batch <= _FIND_LINES:
                for _ in range(batch):
                    newline = find(b"\n", cursor)
                    if newline < 0:
                        break
                    lines.append(buf[cursor:newline])
                    cursor = newline + 1
                full = len(lines) == batch
            else:  # a long range: every complete line read so far, in one split
                last = buf.rfind(b"\n", cursor)
                if last >= 0:
                    lines = buf[cursor:last].split(b"\n")
                    cursor = last + 1
                full = False
            if not full and at_eof and cursor < len(buf):
                lines.append(buf[cursor:])  # the last line, without a newline
                cursor = len(buf)
            if lines:
                yield buf_start + begin, lines, cursor - begin
            batch *= 4
            if not full:
                break
        if len(buf) - cursor > _MAX_LINE_BYTES:
            raise _FormatProblem(f"byte {buf_start + cursor}", "line longer than 16 MiB")


def _gzip_chunks(handle: Handle) -> Generator[_Chunk, None, None]:
    """Lines of a gzip file (one or more members), decompressed from the start."""
    fd, size = handle.fd, handle.size
    inflater = zlib.decompressobj(wbits=31)
    fed = False
    pos = 0
    pending = b""
    buf = b""
    line_number = 1
    while True:
        if not pending:
            if pos >= size:
                break
            pending = os.pread(fd, min(MAX_READ_BYTES, size - pos), pos)
            if not pending:
                break
            pos += len(pending)
        if inflater.eof:  # the previous member ended: another one follows
            pending = pending.lstrip(b"\x00")  # tolerate zero padding after the last member
            if not pending:
                continue
            inflater = zlib.decompressobj(wbits=31)
        consumed_at = pos - len(pending)
        try:
            out = inflater.decompress(pending, _GZIP_OUT_BYTES)
        except zlib.error as exc:
            raise _FormatProblem(
                f"compressed byte {consumed_at}",
                f"corrupt gzip data ({exc}); check the file with 'gzip -t'",
            ) from exc
        fed = True
        pending = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
        buf += out
        lines = buf.split(b"\n")
        buf = lines.pop()
        if len(buf) > _MAX_LINE_BYTES:
            raise _FormatProblem(f"line {line_number + len(lines)}", "line longer than 16 MiB")
        if lines:
            yield line_number, lines, len(out)
            line_number += len(lines)
    if fed and not inflater.eof:
        raise _FormatProblem(
            f"compressed byte {pos}", "truncated gzip data; the file was cut short"
        )
    if buf:
        yield line_number, [buf], len(buf)


def _where(handle: Handle, first: int, lines: list[bytes], index: int) -> str:
    if handle.gzip:
        return f"line {first + index}"
    return f"byte {first + sum(len(line) + 1 for line in lines[:index])}"


#: What :func:`_scan` yields between records when the event loop is due a turn.
_CHECKPOINT: Final = None


def scan_file(
    handle: Handle,
    key: bytes,
    end: bytes,
    *,
    source: str,
    label: str | None,
    memo: RangeMemo | None = None,
) -> Generator[CdxRecord | None, None, None]:
    """Records of one file for lines in ``[key, end)`` (pywb ``iter_range``), in file order.

    A plain generator (the reads are ``pread`` calls that do not wait): it
    yields :data:`_CHECKPOINT` after every 64 KiB read or inflated, where the
    async caller gives the event loop a turn. ``label`` becomes the records'
    ``source`` when given. The caller owns ``handle``. An answer ``memo``
    remembers for this version of the file is given again without reading;
    a short one read to its end without a checkpoint is remembered there.
    """
    identity = handle.identity
    kept = None
    if memo is not None:
        kept = memo.get(identity, key, end)
        if kept is None:
            memo.misses += 1
        else:
            memo.hits += 1
    if kept is not None:
        for image in kept[0]:
            record = CdxRecord.from_snapshot(image)
            if label is not None:
                record.set_source(label)
            yield record
        return
    if handle.gzip:
        chunks = _gzip_chunks(handle)
    else:
        chunks = _plain_chunks(handle, key, _common_prefix(key, end))
    started = False
    previous = b""
    unpaused = 0
    images: list[Image] | None = [] if memo is not None else None
    try:
        for first, lines, read in chunks:
            for index, raw in enumerate(lines):
                if not started:
                    if raw < key:
                        continue
                    started = True
                line = raw.rstrip()
                if line >= end:
                    if images is not None and memo is not None:
                        memo.remember(identity, key, end, images)
                    return
                if not line or line.startswith(CDX_HEADERS):
                    continue
                if line < previous or line < key:
                    _warn_unsorted(handle, _where(handle, first, lines, index))
                    if line < key:
                        continue
                previous = line
                try:
                    record = CdxRecord.parse(line)
                except CdxFormatError as exc:
                    where = _where(handle, first, lines, index)
                    raise SourceBadAnswer(source, f"{handle.path}, {where}: {exc}") from exc
                if images is not None:
                    if len(images) < RANGE_RECORDS:
                        images.append(record.snapshot())
                    else:
                        images = None
                if label is not None:
                    record.set_source(label)
                yield record
            unpaused += read
            if unpaused >= _CHECKPOINT_BYTES:
                unpaused = 0
                images = None
                yield _CHECKPOINT
        if images is not None and memo is not None:
            memo.remember(identity, key, end, images)
    except _FormatProblem as exc:
        raise SourceBadAnswer(source, f"{handle.path}, {exc.where}: {exc.reason}") from exc
    except OSError as exc:
        raise unavailable(source, handle.path, exc) from exc
    finally:
        chunks.close()


def merge_scans(
    scans: list[Generator[CdxRecord | None, None, None]],
) -> Generator[CdxRecord | None, None, None]:
    """Merge file scans by (urlkey, timestamp), ties to the earlier file
    (``heapq.merge`` is stable); one checkpoint is passed on when any file was due one."""
    if len(scans) == 1:
        yield from scans[0]
        return
    due = False

    def records_of(one: Generator[CdxRecord | None, None, None]) -> Iterator[CdxRecord]:
        nonlocal due
        for record in one:
            if record is None:
                due = True
            else:
                yield record

    for record in heapq.merge(*map(records_of, scans), key=_merge_key):
        if due:
            due = False
            yield _CHECKPOINT
        yield record


def _merge_key(record: CdxRecord) -> tuple[str, str]:
    return record.urlkey, record.timestamp


def _warn_unsorted(handle: Handle, where: str) -> None:
    if not handle.warned:
        handle.warned = True
        logger.warning(
            "index file %s is not sorted (%s sorts before the line above it); lookups "
            "may miss captures. Sort it with: LC_ALL=C sort -o FILE FILE",
            handle.path,
            where,
        )
