"""The IA CDX dialect over the gateway's engine: pipeline, paging, resume keys, output.

:func:`ia_lookup` answers an :class:`~gateway.cdx.ia_query.IaQuery` from
:meth:`~gateway.index.collection.Collection.lookup` (the same engine, index
sources and merge order as ``/{coll}/index``) with these stages, in order:

1. the engine's answer for url/matchType/from/to, sorted by (urlkey,
   timestamp) ascending; ties keep the engine's order (the member listed first
   in the config first), so repeated queries see the same sequence;
2. ``filter`` (each :class:`~gateway.cdx.ia_query.IaFilter`, ANDed), applied
   inside the engine before its limit, as ``/index`` applies its filters: a
   group member holds only lines that pass, and a ``sequence`` step with none
   falls through to the next;
3. ``collapse`` (each :class:`~gateway.cdx.ia_query.Collapse` in order, over
   adjacent lines: a line equal to the previous *kept* line is dropped).

   The stream at this point is the **full result**.

4. ``page``: page *i* is the lines at positions ``[i * pageSize, (i + 1) *
   pageSize)`` of the full result (0-based), so pages 0, 1, 2... concatenated
   are the full result, every page but the last holds exactly ``pageSize``
   lines, and a page past the end is empty. ``showNumPages`` answers
   ``ceil(len(full result) / pageSize)``. A page costs a scan of the full
   result up to its end (the IA pages ZipNum blocks; here any index pages);
5. ``resumeKey``: lines up to and including the key's position are skipped
   (see :class:`~gateway.cdx.ia_query.ResumeKey`); within a page when paging;
6. ``offset``: the next ``offset`` lines are skipped;
7. ``limit``: the first ``limit`` lines (default and cap
   :data:`~gateway.cdx.ia_query.MAX_LIMIT`), or the last ``-limit`` lines. When
   a positive limit leaves lines unread and ``showResumeKey`` is true, the
   key of the last line written is :attr:`IaAnswer.resume_key`.

So the lines of a query with ``limit=N&showResumeKey=true``, followed by the
lines of the same query with ``resumeKey=`` each printed key, are the lines of
the unlimited query, without a duplicate or a gap (while the indexes do not
change).

``fastLatest=true`` (with nothing but url, matchType, from/to and limit)
reads the index backwards and keeps only the last ``|limit|`` lines, written
oldest first; ties between identical (urlkey, timestamp) captures of
different group members may then come in another order than in the ascending
answer. Without a collapse or paging, a resumed query starts its index scan
at the key's urlkey instead of the start of the range.
"""

from __future__ import annotations

import json
import math
import sys
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final, TypeVar

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.ia_query import (
    MAX_LIMIT,
    Collapse,
    IaQuery,
    ResumeKey,
    ia_line,
)
from gateway.cdx.query import CaptureQuery
from gateway.index.collection import Collection, Step

__all__ = [
    "CONTENT_TYPES",
    "IaAnswer",
    "count_pages",
    "ia_lookup",
    "serialize_ia",
]

#: Content-Type of each IA output.
CONTENT_TYPES: Final[dict[str, str]] = {"text": "text/plain", "json": "application/json"}
_UNBOUNDED: Final = sys.maxsize

Positioned = tuple[CdxRecord, int]
_T = TypeVar("_T")


@asynccontextmanager
async def _closing(stream: AsyncIterator[_T]) -> AsyncGenerator[AsyncIterator[_T], None]:
    """Close ``stream`` (when it can be closed) on the way out, so that an answer
    cut short by ``limit`` releases the files and connections behind it at once."""
    try:
        yield stream
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


@dataclass(slots=True)
class IaAnswer:
    """The lines of an IA query (``lines``) and what the engine reported.

    ``resume_key`` is set once ``lines`` is exhausted, when the limit left
    lines unread and ``showResumeKey`` was asked for. ``step`` is the sequence
    step that answered (None when nothing did); ``errors`` maps failed
    sources to reasons (the ``ResErrors`` header).
    """

    step: Step | None
    errors: dict[str, str]
    lines: AsyncIterator[CdxRecord]
    resume_key: ResumeKey | None = field(default=None)


async def _empty() -> AsyncIterator[CdxRecord]:
    return
    yield  # pragma: no cover


async def collapse(records: AsyncIterator[CdxRecord], spec: Collapse) -> AsyncIterator[CdxRecord]:
    """Drop each record whose ``spec`` value equals that of the previous kept record."""
    previous: str | None = None
    async with _closing(records):
        async for record in records:
            value = spec.value(record)
            if value != previous:
                previous = value
                yield record


async def window(
    records: AsyncIterator[CdxRecord], start: int, stop: int
) -> AsyncIterator[CdxRecord]:
    """Records at 0-based positions ``[start, stop)``; stops reading at ``stop``."""
    position = 0
    async with _closing(records):
        async for record in records:
            if position >= stop:
                return
            if position >= start:
                yield record
            position += 1


async def positioned(records: AsyncIterator[CdxRecord]) -> AsyncIterator[Positioned]:
    """Pair each record with its 1-based position among adjacent records with
    the same (urlkey, timestamp): the tie-break part of a resume key."""
    previous: tuple[str, str] | None = None
    count = 0
    async with _closing(records):
        async for record in records:
            key = (record.urlkey, record.timestamp)
            count = count + 1 if key == previous else 1
            previous = key
            yield record, count


async def resume_after(
    pairs: AsyncIterator[Positioned], key: ResumeKey
) -> AsyncIterator[Positioned]:
    """Skip pairs up to and including ``key``'s position (input sorted by urlkey, timestamp)."""
    mark = (key.urlkey, key.timestamp)
    resumed = False
    async with _closing(pairs):
        async for record, count in pairs:
            if not resumed:
                current = (record.urlkey, record.timestamp)
                if current < mark:
                    continue
                if current == mark and (key.skip is None or count <= key.skip):
                    continue
                resumed = True
            yield record, count


async def skip(pairs: AsyncIterator[Positioned], count: int) -> AsyncIterator[Positioned]:
    """All but the first ``count`` pairs."""
    seen = 0
    async with _closing(pairs):
        async for pair in pairs:
            if seen < count:
                seen += 1
                continue
            yield pair


def _scan_bound(query: IaQuery) -> int:
    """How many engine records can matter (the engine's ``limit``)."""
    if (
        query.collapse
        or query.resume_key is not None
        or query.show_num_pages
        or (query.limit is not None and query.limit < 0)
    ):
        return _UNBOUNDED
    if query.page is not None:
        return min((query.page + 1) * query.page_size, _UNBOUNDED)
    limit = MAX_LIMIT if query.limit is None else query.limit
    return min(query.offset + limit + 1, _UNBOUNDED)


def _fast_latest(query: IaQuery) -> bool:
    return (
        query.fast_latest
        and not query.filters
        and not query.collapse
        and query.page is None
        and query.resume_key is None
        and query.offset == 0
    )


async def _full_result(
    collection: Collection, query: IaQuery, engine: CaptureQuery
) -> tuple[Step | None, dict[str, str], AsyncIterator[CdxRecord]]:
    if engine.key >= engine.end_key:
        return None, {}, _empty()
    if query.filters:
        # Stage 2 runs inside the engine, before its limit: each group member
        # then holds only lines that pass, and no more than the limit of them.
        engine = engine.evolve(filters=engine.filters + query.filters)
    step, lookup = await collection.lookup(engine)
    records: AsyncIterator[CdxRecord] = aiter(lookup)
    for spec in query.collapse:
        records = collapse(records, spec)
    return step, lookup.errors, records


async def count_pages(collection: Collection, query: IaQuery) -> tuple[int, IaAnswer]:
    """``showNumPages``: the number of pages of the full result, and the engine's report.

    Raises what :meth:`Collection.lookup` raises (``AllSourcesFailed``).
    """
    engine = query.base.evolve(limit=_UNBOUNDED)
    step, errors, records = await _full_result(collection, query, engine)
    count = 0
    async with _closing(records):
        async for _ in records:
            count += 1
    return math.ceil(count / query.page_size), IaAnswer(step, errors, _empty())


async def ia_lookup(collection: Collection, query: IaQuery) -> IaAnswer:
    """Run ``query`` (see the module docstring for the stages and their order).

    Raises what :meth:`Collection.lookup` raises: ``AllSourcesFailed`` (503)
    when every source failed; ``BadRequest`` for an unknown ``sources`` name.
    """
    limit = MAX_LIMIT if query.limit is None else query.limit
    if _fast_latest(query):
        engine = query.base.evolve(sort="reverse", limit=-limit)
        step, errors, newest_first = await _full_result(collection, query, engine)
        latest = [record async for record in newest_first]
        return IaAnswer(step, errors, _replay(latest[::-1]))

    engine = query.base.evolve(limit=_scan_bound(query))
    resume = query.resume_key
    if (
        resume is not None
        and not query.collapse
        and query.page is None
        and resume.urlkey > engine.key
    ):
        # Lines before the key are skipped anyway, and the key's own capture keeps
        # the step that answered first non-empty, so a sequence answers from it again.
        engine = engine.evolve(key=resume.urlkey)
    step, errors, records = await _full_result(collection, query, engine)
    if query.page is not None:
        start = query.page * query.page_size
        records = window(records, start, start + query.page_size)
    pairs = positioned(records)
    if resume is not None:
        pairs = resume_after(pairs, resume)
    if query.offset:
        pairs = skip(pairs, query.offset)
    answer = IaAnswer(step, errors, _empty())
    answer.lines = _limited(pairs, limit, query.show_resume_key, answer)
    return answer


async def _replay(records: Sequence[CdxRecord]) -> AsyncIterator[CdxRecord]:
    for record in records:
        yield record


async def _limited(
    pairs: AsyncIterator[Positioned], limit: int, show_key: bool, answer: IaAnswer
) -> AsyncIterator[CdxRecord]:
    async with _closing(pairs):
        if limit < 0:
            tail: deque[CdxRecord] = deque(maxlen=-limit)
            async for record, _ in pairs:
                tail.append(record)
            for record in tail:
                yield record
            return
        emitted = 0
        last: Positioned | None = None
        async for record, count in pairs:
            if emitted >= limit:
                if show_key and last is not None:
                    answer.resume_key = ResumeKey(last[0].urlkey, last[0].timestamp, last[1])
                return
            yield record
            emitted += 1
            last = (record, count)


def _text_value(value: str) -> str:
    # A space inside a value would split the line: the IA's values never hold one.
    return value.replace(" ", "%20")


async def serialize_ia(answer: IaAnswer, query: IaQuery) -> AsyncIterator[str]:
    """The answer's text in the IA's format, in pieces to write in order.

    - text: one line per capture, the ``fl`` values separated by spaces; with a
      resume key, a blank line and then the key;
    - json: ``[[header...],\\n [values...],\\n ...]`` where every value is a
      string; with a resume key, ``[]`` and ``["key"]`` end the array;
    - an empty answer is an empty body, except the unpaged JSON answer ``[]``.
    """
    fields = query.fields
    lines = answer.lines
    async with _closing(lines):
        first = await anext(lines, None)
        if first is None:
            if query.output == "json" and query.page is None:
                yield "[]\n"
            return
        if query.output == "text":
            yield " ".join(map(_text_value, ia_line(first, fields))) + "\n"
            async for record in lines:
                yield " ".join(map(_text_value, ia_line(record, fields))) + "\n"
            if answer.resume_key is not None:
                yield "\n" + answer.resume_key.encode() + "\n"
            return
        yield "[" + json.dumps(list(fields)) + ",\n" + json.dumps(ia_line(first, fields))
        async for record in lines:
            yield ",\n" + json.dumps(ia_line(record, fields))
        if answer.resume_key is not None:
            yield ",\n[],\n" + json.dumps([answer.resume_key.encode()])
        yield "]\n"
