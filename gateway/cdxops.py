"""Streaming operations over async iterators of CdxRecord (pywb ``cdxops``).

:func:`process` applies a :class:`~gateway.query.CaptureQuery` to a stream
sorted by (urlkey, timestamp): filters, then the from/to clamp, then one of
closest-sort, reverse or plain limit, in pywb's order. Every function keeps
at most ``limit`` records in memory (closest and reverse must look at the
whole range; plain order streams).
"""

from __future__ import annotations

import calendar
import functools
import heapq
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence

from gateway.cdxj import CdxRecord
from gateway.query import CaptureQuery, CdxFilter

__all__ = [
    "apply_filters",
    "clamp",
    "limit",
    "merge_sorted",
    "process",
    "reverse",
    "sort_closest",
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


async def apply_filters(
    records: AsyncIterator[CdxRecord], filters: Sequence[CdxFilter]
) -> AsyncIterator[CdxRecord]:
    """Yield records passing every filter (ANDed), in input order."""
    async for record in records:
        if all(check(record) for check in filters):
            yield record


async def clamp(
    records: AsyncIterator[CdxRecord], from_ts: str | None, to_ts: str | None
) -> AsyncIterator[CdxRecord]:
    """Yield records with ``from_ts <= timestamp <= to_ts`` (14-digit, inclusive)."""
    async for record in records:
        ts = record.timestamp
        if from_ts and ts < from_ts:
            continue
        if to_ts and ts > to_ts:
            continue
        yield record


async def limit(records: AsyncIterator[CdxRecord], count: int) -> AsyncIterator[CdxRecord]:
    """Yield the first ``count`` records and stop reading the input."""
    if count <= 0:
        return
    seen = 0
    async for record in records:
        yield record
        seen += 1
        if seen >= count:
            break


async def reverse(records: AsyncIterator[CdxRecord], count: int) -> AsyncIterator[CdxRecord]:
    """Yield the last ``count`` records, newest (last in input order) first."""
    if count <= 0:
        return
    tail: deque[CdxRecord] = deque(maxlen=count)
    async for record in records:
        tail.append(record)
    while tail:
        yield tail.pop()


async def sort_closest(
    records: AsyncIterator[CdxRecord], closest: str, count: int
) -> AsyncIterator[CdxRecord]:
    """Yield up to ``count`` records ordered by distance in seconds to ``closest``.

    Equal distances keep input order (the earlier capture, or the member listed
    first in the config for identical timestamps), as pywb's ``bisect_right``.
    """
    if count <= 0:
        return
    target = timestamp_to_seconds(closest)
    # Max-heap of the best `count` by (distance, input position), as negated tuples.
    best: list[tuple[int, int, CdxRecord]] = []
    position = 0
    async for record in records:
        distance = abs(timestamp_to_seconds(record.timestamp) - target)
        item = (-distance, -position, record)
        position += 1
        if len(best) < count:
            heapq.heappush(best, item)
        elif item > best[0]:
            heapq.heapreplace(best, item)
    for _, _, record in sorted(best, key=lambda item: (-item[0], -item[1])):
        yield record


def process(records: AsyncIterator[CdxRecord], query: CaptureQuery) -> AsyncIterator[CdxRecord]:
    """Apply the query's filters, time range, order and limit (pywb ``process_cdx``)."""
    if query.filters:
        records = apply_filters(records, query.filters)
    if query.from_ts or query.to_ts:
        records = clamp(records, query.from_ts, query.to_ts)
    if query.sort == "closest" and query.closest:
        return sort_closest(records, query.closest, query.limit)
    if query.sort == "reverse":
        return reverse(records, query.limit)
    return limit(records, query.limit)


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


async def from_iterable(records: Iterable[CdxRecord]) -> AsyncIterator[CdxRecord]:
    """An async iterator over an in-memory sequence of records."""
    for record in records:
        yield record
