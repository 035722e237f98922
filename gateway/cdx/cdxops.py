"""Streaming operations over async iterators of CdxRecord (pywb ``cdxops``).

:func:`process` applies a :class:`~gateway.cdx.query.CaptureQuery` to a stream
sorted by (urlkey, timestamp): filters, then the from/to clamp, then one of
closest-sort, reverse or plain limit, in pywb's order, keeping at most
``limit`` records in memory (closest and reverse must look at the whole
range; plain order streams). :func:`merge_sorted` merges sorted streams;
:class:`RecordList` serves records already in memory.

Every stream here closes the streams it reads when it ends or is closed:
an async generator left to the garbage collector costs a cross-thread
wake-up of the event loop and a task to close it (asyncio's finalizer hook).
"""

from __future__ import annotations

import asyncio
import calendar
import functools
import heapq
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Sequence,
)

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery

__all__ = [
    "Gate",
    "LocalScan",
    "RecordList",
    "ResumedScan",
    "merge_sorted",
    "process",
    "process_scan",
    "timestamp_to_seconds",
]


@functools.lru_cache(maxsize=65536)
def timestamp_to_seconds(ts: str) -> int:
    """Seconds since the epoch of a 14-digit UTC timestamp; shorter ones are padded down.

    Out-of-range parts are clamped as warcio does, so bad index data cannot
    raise. Cached: an index repeats the same timestamps across queries.

    >>> timestamp_to_seconds("19700101000001")
    1
    >>> timestamp_to_seconds("2014")
    1388534400
    >>> timestamp_to_seconds("20141399999999") == timestamp_to_seconds("20141231235959")
    True
    """
    ts = (ts + "10000101000000"[len(ts) :])[:14] if len(ts) < 14 else ts[:14]
    if not ts.isdigit():
        year = int(ts[:4]) if ts[:4].isdigit() else 1000
        return calendar.timegm((min(max(year, 1000), 2999), 12, 31, 23, 59, 59))
    year = min(max(int(ts[0:4]), 1000), 2999)
    month = min(max(int(ts[4:6]), 1), 12)
    day = min(max(int(ts[6:8]), 1), calendar.monthrange(year, month)[1])
    hour = min(int(ts[8:10]), 23)
    minute = min(int(ts[10:12]), 59)
    second = min(int(ts[12:14]), 59)
    return calendar.timegm((year, month, day, hour, minute, second))


#: A capture predicate run on every record right after tagging, before
#: anything else: False drops the record (access control's ``exclude``,
#: :class:`gateway.access.policy.AccessGate`), True keeps it (it may annotate it).
Gate = Callable[[CdxRecord], bool]


def process(
    records: AsyncIterator[CdxRecord],
    query: CaptureQuery,
    *,
    tag: str | None = None,
    gate: Gate | None = None,
) -> AsyncGenerator[CdxRecord, None]:
    """Apply the query's filters, time range, order and limit (pywb ``process_cdx``).

    In pywb's order: revisits resolved (``resolveRevisits``), filters
    (ANDed), the inclusive ``from``/``to`` clamp, ``collapseTime``, then
    one of

    - closest: up to ``limit`` records by distance in seconds to ``closest``;
      equal distances keep input order (the earlier capture, or the member
      listed first for identical timestamps), as pywb's ``bisect_right``;
    - reverse: the last ``limit`` records, last first;
    - otherwise the first ``limit`` records, streamed: reading stops there.

    With ``tag`` every record is tagged first as pywb tags a member's
    captures: ``source`` is ``tag`` (``tag:sub`` when the source set a
    sub-name such as a directory member's file name), ``source-coll`` is
    ``tag``. With ``gate``, each tagged record is passed to it and dropped
    when it returns False, before revisits, filters and limit see it. One
    generator does all of it, and it closes ``records`` when it finishes,
    fails or is closed, so no generator is left to the garbage collector.
    """
    return _process(records, query, tag, gate)


class _Selection:
    """The per-record part of :func:`process`: tag, filter, clamp, then keep
    (closest, reverse) or pass on (plain order) each record."""

    __slots__ = (
        "best",
        "closest",
        "collapse_time",
        "count",
        "filters",
        "from_ts",
        "gate",
        "last_token",
        "position",
        "resolve",
        "reverse",
        "tag",
        "tail",
        "target",
        "to_ts",
    )

    def __init__(self, query: CaptureQuery, tag: str | None, gate: Gate | None = None) -> None:
        self.gate = gate
        self.filters = query.filters
        self.from_ts, self.to_ts = query.from_ts, query.to_ts
        self.count = query.limit
        self.closest = query.closest if query.sort == "closest" else None
        self.reverse = query.sort == "reverse"
        self.target = timestamp_to_seconds(self.closest) if self.closest else 0
        self.tag = tag
        self.resolve = _RevisitResolver() if query.resolve_revisits else None
        self.collapse_time = query.collapse_time
        self.last_token: tuple[str, str] | None = None
        # closest: max-heap of the best `count` by (distance, input position), negated.
        self.best: list[tuple[int, int, CdxRecord]] = []
        self.tail: deque[CdxRecord] = deque(maxlen=max(self.count, 0))
        self.position = 0  # input position of the next record taken for closest

    def take(self, record: CdxRecord) -> bool:
        """Tag, filter and clamp ``record``; True when it goes out at once (plain order)."""
        if self.tag is not None:
            record.tag(self.tag)
        if self.gate is not None and not self.gate(record):
            return False
        if self.resolve is not None:
            self.resolve(record)
        filters = self.filters
        if filters and not all(check(record) for check in filters):
            return False
        timestamp = record.timestamp
        from_ts, to_ts = self.from_ts, self.to_ts
        if (from_ts and timestamp < from_ts) or (to_ts and timestamp > to_ts):
            return False
        if self.collapse_time is not None:
            token = (timestamp[: self.collapse_time], record.status)
            if token == self.last_token:
                return False
            self.last_token = token
        if self.closest:
            distance = abs(timestamp_to_seconds(timestamp) - self.target)
            item = (-distance, -self.position, record)
            self.position += 1
            best = self.best
            if len(best) < self.count:
                heapq.heappush(best, item)
            elif item > best[0]:
                heapq.heapreplace(best, item)
            return False
        if self.reverse:
            self.tail.append(record)
            return False
        return True

    def kept(self) -> Iterator[CdxRecord]:
        """What closest or reverse kept, in answer order (nothing for plain order)."""
        if self.closest:
            for _, _, record in sorted(self.best, key=lambda item: (-item[0], -item[1])):
                yield record
        elif self.reverse:
            tail = self.tail
            while tail:
                yield tail.pop()


def process_scan(
    scan: Generator[CdxRecord | None, None, None],
    query: CaptureQuery,
    *,
    tag: str | None = None,
    gate: Gate | None = None,
) -> Generator[CdxRecord | None, None, None]:
    """:func:`process` over a :class:`LocalScan`'s generator, as a plain generator.

    Yields the answer's records in order and passes on the scan's ``None``
    checkpoints (the caller gives the event loop a turn there). Closes
    ``scan`` when it ends, fails or is closed. A query that keeps every
    record in input order (no filter, time range, closest, reverse, revisit
    resolution or collapsing) only tags, gates and counts them.
    """
    if (
        query.sort == "ascending"
        and not query.filters
        and not query.from_ts
        and not query.to_ts
        and not query.resolve_revisits
        and query.collapse_time is None
    ):
        return _passed(scan, query.limit, tag, None, gate)
    selection = _Selection(query, tag, gate)
    return _passed(scan, selection.count, None, selection, None)


def _passed(
    scan: Generator[CdxRecord | None, None, None],
    count: int,
    tag: str | None,
    selection: _Selection | None,
    gate: Gate | None,
) -> Generator[CdxRecord | None, None, None]:
    """Up to ``count`` records: those ``selection`` passes on at once (it tags
    and gates them), then what it kept; without one, every record, tagged with
    ``tag``, that ``gate`` keeps. The scan's checkpoints are passed on. Closes
    ``scan``."""
    take = selection.take if selection is not None else None
    seen = 0
    try:
        if count <= 0:
            return
        for record in scan:
            if record is None:
                yield None
                continue
            if take is None:
                if tag is not None:
                    record.tag(tag)
                if gate is not None and not gate(record):
                    continue
            elif not take(record):
                continue
            yield record
            seen += 1
            if seen >= count:
                return
        if selection is not None:
            yield from selection.kept()
    finally:
        scan.close()


async def _process(
    records: AsyncIterator[CdxRecord], query: CaptureQuery, tag: str | None, gate: Gate | None
) -> AsyncGenerator[CdxRecord, None]:
    try:
        if isinstance(records, LocalScan):
            # Records of a local file: no await per record, only at checkpoints.
            for record in process_scan(records.scan, query, tag=tag, gate=gate):
                if record is None:
                    await asyncio.sleep(0)
                else:
                    yield record
            return
        selection = _Selection(query, tag, gate)
        count, seen = selection.count, 0
        if count <= 0:
            return
        async for record in records:
            if selection.take(record):
                yield record
                seen += 1
                if seen >= count:
                    return
        for record in selection.kept():
            yield record
    finally:
        close = getattr(records, "aclose", None)
        if close is not None:
            await close()


class LocalScan:
    """The answer of a source that reads without waiting (a local file), as an
    ``AsyncIterator[CdxRecord]`` over a plain generator.

    ``scan`` yields records, and ``None`` where the event loop is due a turn
    (after every 64 KiB read). Iterated as an async iterator it awaits
    ``asyncio.sleep(0)`` at those points; :func:`process` iterates ``scan``
    itself, with no await per record. ``aclose`` (or ``close``) closes the
    generator, which releases what it holds in its ``finally``.
    """

    __slots__ = ("scan",)

    def __init__(self, scan: Generator[CdxRecord | None, None, None]) -> None:
        self.scan = scan

    def __aiter__(self) -> LocalScan:
        return self

    async def __anext__(self) -> CdxRecord:
        for record in self.scan:
            if record is not None:
                return record
            try:
                await asyncio.sleep(0)
            except BaseException:  # cancelled at a checkpoint: release what the scan holds
                self.scan.close()
                raise
        raise StopAsyncIteration

    def close(self) -> None:
        self.scan.close()

    async def aclose(self) -> None:
        self.scan.close()


async def merge_sorted(
    streams: Sequence[AsyncGenerator[CdxRecord, None]],
) -> AsyncGenerator[CdxRecord, None]:
    """Merge streams sorted by (urlkey, timestamp); ties go to the earlier stream.

    An async ``heapq.merge`` holding one record per stream; closes every stream
    when done, failed or closed early.
    """
    try:
        if len(streams) == 1:
            async for only in streams[0]:
                yield only
            return
        heap: list[tuple[str, str, int, CdxRecord]] = []
        for index, stream in enumerate(streams):
            record: CdxRecord | None = await anext(stream, None)
            if record is not None:
                heap.append((record.urlkey, record.timestamp, index, record))
        heapq.heapify(heap)
        while heap:
            index = heap[0][2]
            yield heap[0][3]
            following: CdxRecord | None = await anext(streams[index], None)
            if following is None:
                heapq.heappop(heap)
            else:
                heapq.heapreplace(heap, (following.urlkey, following.timestamp, index, following))
    finally:
        for stream in streams:
            await stream.aclose()


class RecordList:
    """An async iterator over records in memory (a class, not a generator: nothing to finalize)."""

    __slots__ = ("_records",)

    def __init__(self, records: Iterable[CdxRecord] = ()) -> None:
        self._records: Iterator[CdxRecord] = iter(records)

    def __aiter__(self) -> RecordList:
        return self

    async def __anext__(self) -> CdxRecord:
        record = next(self._records, None)
        if record is None:
            raise StopAsyncIteration
        return record

    def remaining(self) -> list[CdxRecord]:
        """Every record not yet iterated, at once (the list is then empty)."""
        records = list(self._records)
        self._records = iter(())
        return records

    async def aclose(self) -> None:
        self._records = iter(())


class ResumedScan:
    """An async iterator over records already taken from a :func:`process_scan`
    generator, then the rest of that generator as a :class:`LocalScan`
    (awaiting a turn of the event loop at its checkpoints). ``aclose``
    closes the generator."""

    __slots__ = ("_rest", "_taken")

    def __init__(
        self, taken: list[CdxRecord], scan: Generator[CdxRecord | None, None, None]
    ) -> None:
        self._taken: Iterator[CdxRecord] = iter(taken)
        self._rest = LocalScan(scan)

    def __aiter__(self) -> ResumedScan:
        return self

    async def __anext__(self) -> CdxRecord:
        record = next(self._taken, None)
        if record is not None:
            return record
        return await self._rest.__anext__()

    async def aclose(self) -> None:
        self._taken = iter(())
        self._rest.close()


#: Fields of the original a resolved revisit line gets as ``orig.*`` (pywb ``ORIG_TUPLE``).
_ORIG_FIELDS = ("length", "offset", "filename")


class _RevisitResolver:
    """pywb's ``cdx_resolve_revisits`` over one ascending stream.

    The first non-revisit capture of each payload digest is its original; a
    later revisit (``mime`` ``warc/revisit``, or no ``filename``) with that
    digest takes the original's ``mime`` and ``status`` (where it has those
    fields) and gets ``orig.length``, ``orig.offset`` and ``orig.filename``
    from it; every other line gets ``-`` for the three.
    """

    __slots__ = ("_originals",)

    def __init__(self) -> None:
        self._originals: dict[str, CdxRecord] = {}

    def __call__(self, record: CdxRecord) -> None:
        fields = record.fields
        is_revisit = fields.get("mime") == "warc/revisit" or fields.get("filename") == "-"
        digest = fields.get("digest", "")
        original = self._originals.get(digest) if digest else None
        if digest and original is None and not is_revisit:
            self._originals[digest] = record
        if original is not None and is_revisit:
            found = original.fields
            if "mime" in fields:
                fields["mime"] = found.get("mime", "")
            if "status" in fields:
                fields["status"] = found.get("status", "")
            for name in _ORIG_FIELDS:
                fields["orig." + name] = found.get(name, "-")
        else:
            for name in _ORIG_FIELDS:
                fields["orig." + name] = "-"
