"""index_group: concurrent lookups with deadlines, merge, honest errors.

An :class:`IndexGroup` queries its members concurrently inside an
``asyncio.TaskGroup``, each under its own ``asyncio.timeout(timeout_s)``; a
member that fails or times out is reported in ``errors`` and never counted as
"no captures". Each member's stream is reduced by the query first (filters,
time range, order, limit: at most ``limit`` records per member), then the
members are merged:

- ascending: by (urlkey, timestamp), ties to the member listed first;
- closest: by distance to ``closest`` in seconds, ties as above;
- reverse: by (urlkey, timestamp) descending, ties as above.

A group of one member streams its answer instead (the deadline covers the
first record).

With an :attr:`IndexGroup.access` policy, every member's captures pass
through its gate for the lookup first (:mod:`gateway.access.policy`): an
excluded capture is dropped before filters and limit, in every member, so
no route and no source type can list, count or load it. Each member has a
:class:`~gateway.index.breaker.Breaker`; groups are the steps of a
:class:`~gateway.index.collection.Collection`.

Only faults of a member feed its breaker. A member that refuses the query as
the client's error (:class:`~gateway.errors.SourceRefused`: a remote archive's
``400`` about ``url=javascript:alert(1)``) is listed in ``errors`` without
touching its breaker's state; when every member refused,
:attr:`Lookup.refusal` carries the refusal for the client (a 4xx), and the
lookup does not count as failed.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import AsyncIterator, Awaitable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from gateway.access.policy import AccessPolicy
from gateway.cdx import cdxops
from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery
from gateway.errors import (
    BadRequest,
    SourceError,
    SourceRefused,
    SourceSkipped,
    SourceUnavailable,
)
from gateway.index.breaker import Breaker
from gateway.index.eager import Resumed, run_within
from gateway.sources.base import IndexSource

__all__ = ["IndexGroup", "Lookup"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Lookup:
    """The answer of one step: processed records and per-source failures.

    ``records`` is already filtered, ordered and limited by the query.
    ``errors`` maps a member name to why it failed; ``failed_all`` is true
    when every queried member failed or refused the query, at least one of
    them failing (the API answers 503, not "no captures"); ``refusal`` is set
    instead when every queried member refused the query as the client's
    error (the first in config order: the API answers its 4xx).
    ``outcomes`` maps every queried member to ``"ok: N captures"`` (``"ok"``
    for a streamed single member) or its failure, in config order.

    Iterating yields ``first`` then the rest of ``records``. For a streamed
    single member (``streamed_from`` names it), a failure after the first
    record ends the stream early instead (the status line is already sent)
    and is logged. The consumer calls :meth:`aclose` when done.
    """

    records: AsyncIterator[CdxRecord]
    errors: dict[str, str] = field(default_factory=dict)
    failed_all: bool = False
    #: The first record, already read from ``records`` (None: the answer is empty).
    first: CdxRecord | None = None
    outcomes: dict[str, str] = field(default_factory=dict)
    streamed_from: str | None = None
    refusal: SourceRefused | None = None

    def __aiter__(self) -> AsyncIterator[CdxRecord]:
        return _Answer(self)

    def in_memory(self) -> list[CdxRecord] | None:
        """Every record of the answer at once when they are all in memory (a local
        lookup that finished without waiting, a merged group), else None.

        Call it before iterating; the records are then taken out of ``records``.
        """
        records = self.records
        if not isinstance(records, cdxops.RecordList):
            return None
        rest = records.remaining()
        first = self.first
        if first is None:
            return rest
        self.first = None
        rest.insert(0, first)
        return rest

    async def aclose(self) -> None:
        """Stop the underlying stream early (releases files and connections)."""
        close = getattr(self.records, "aclose", None)
        if close is not None:
            await close()


class _Answer:
    """Iterator of a :class:`Lookup` (a class, not an async generator: see cdxops)."""

    __slots__ = ("_first", "_lookup")

    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup
        self._first = lookup.first

    def __aiter__(self) -> _Answer:
        return self

    async def __anext__(self) -> CdxRecord:
        first = self._first
        if first is not None:
            self._first = None
            return first
        lookup = self._lookup
        try:
            return await lookup.records.__anext__()
        except SourceError as exc:
            if lookup.streamed_from is None:
                raise
            logger.warning("source %s failed mid-stream: %s", lookup.streamed_from, exc.reason)
            raise StopAsyncIteration from None


class IndexGroup:
    """Members queried concurrently under a per-member deadline (pywb ``index_group``).

    ``members`` keep config order: that order breaks ties in the merge.
    ``access``: the collection's access policy (None: every capture is served).
    """

    def __init__(
        self,
        members: Sequence[IndexSource],
        timeout_s: float = 5.0,
        access: AccessPolicy | None = None,
    ) -> None:
        self.members = list(members)
        self.timeout_s = timeout_s
        self.access = access
        self.breakers = {member.name: Breaker() for member in self.members}
        self._everyone = list(enumerate(self.members))

    def select(self, query: CaptureQuery) -> list[tuple[int, IndexSource]]:
        """Members chosen by ``sources=`` (``a,b`` or ``!a``), with config positions
        (a list the caller does not change).

        Raises :class:`BadRequest` for a name that is not a member.
        """
        indexed = self._everyone
        if not query.sources:
            return indexed
        names = {member.name for member in self.members}
        unknown = [name for name in query.sources if name not in names]
        if unknown:
            raise BadRequest(
                "sources",
                f"unknown source {unknown[0]!r}; expected one of {', '.join(sorted(names))}",
            )
        wanted = set(query.sources)
        if query.exclude_sources:
            return [(i, m) for i, m in indexed if m.name not in wanted]
        return [(i, m) for i, m in indexed if m.name in wanted]

    async def lookup(self, query: CaptureQuery, *, deadline: float | None = None) -> Lookup:
        """Query the selected members; see the module docstring for order and errors.

        ``deadline`` (event-loop time) bounds every member; without one it is
        ``timeout_s`` from now. A fuzzy retry passes the exact lookup's, so
        one request waits at most ``timeout_s`` on a member whatever path
        it takes.

        Members that read local files (their answer is a
        :class:`~gateway.cdx.cdxops.LocalScan`) are started at once in the calling
        task, as eager tasks would be: a member that finishes without waiting
        costs no task and no timer. One that has to wait (a checkpoint of a
        long scan) goes on in a task under the same deadline as the others.
        """
        selected = self.select(query)
        if deadline is None:
            deadline = self.deadline()
        access = self.access
        gate = access.gate(query.key, query.end_key) if access is not None else None
        if len(selected) == 1:
            return await self._lookup_one(selected[0][1], query, deadline, gate)
        results: dict[int, list[CdxRecord]] = {}
        failures: dict[str, SourceError] = {}

        async def run(position: int, member: IndexSource, work: Awaitable[list[CdxRecord]]) -> None:
            try:
                async with asyncio.timeout_at(deadline):
                    results[position] = await work
            except (TimeoutError, SourceError) as exc:
                failures[member.name] = self._fail(member, exc)

        pending: list[tuple[int, IndexSource, Awaitable[list[CdxRecord]]]] = []
        started: list[Coroutine[Any, Any, list[CdxRecord]]] = []
        try:
            for position, member in selected:
                try:
                    self.breakers[member.name].check(member.name)
                except SourceSkipped as exc:
                    failures[member.name] = exc
                    continue
                records = member.lookup(query)
                collect = self._collect(member, records, query, gate)
                started.append(collect)
                if not isinstance(records, cdxops.LocalScan):
                    pending.append((position, member, collect))
                    continue
                try:
                    waiting_on = collect.send(None)
                except StopIteration as done:
                    results[position] = done.value
                except SourceError as exc:
                    failures[member.name] = self._fail(member, exc)
                else:  # a local scan's checkpoint: the rest goes on in a task
                    pending.append((position, member, Resumed(collect, waiting_on)))
        except BaseException:
            for collect in started:
                collect.close()  # never awaited, or suspended at a checkpoint
            raise
        if pending:
            async with asyncio.TaskGroup() as group:
                for position, member, work in pending:
                    group.create_task(run(position, member, work))
        errors = {name: failure.reason for name, failure in failures.items()}
        outcomes = {
            member.name: errors.get(member.name) or _ok(len(results[position]))
            for position, member in selected
        }
        merged = iter(_merge(results, query))
        first = next(merged, None)
        failed_all = bool(selected) and len(failures) == len(selected)
        answer = Lookup(cdxops.RecordList(merged), errors, failed_all, first, outcomes)
        if failed_all and all(isinstance(f, SourceRefused) for f in failures.values()):
            answer.failed_all = False  # the client's error: the first refusal in config order
            answer.refusal = cast("SourceRefused", failures[selected[0][1].name])
        return answer

    def deadline(self) -> float:
        """The event-loop time ``timeout_s`` from now: a lookup's deadline."""
        return asyncio.get_running_loop().time() + self.timeout_s

    def _fail(self, member: IndexSource, exc: BaseException) -> SourceError:
        """``exc`` as the member's failure, counted by its breaker: a fault feeds it,
        a refusal (the client's error) is counted apart, a skip was counted already."""
        breaker = self.breakers[member.name]
        if isinstance(exc, SourceSkipped):
            return exc
        if isinstance(exc, SourceRefused):
            breaker.record_refused()
            return exc
        if isinstance(exc, TimeoutError):
            error: SourceError = SourceUnavailable(
                member.name, f"timeout after {self.timeout_s:g} s"
            )
            breaker.record_failure(error.reason, timed_out=True)
            return error
        assert isinstance(exc, SourceError)
        retry_after = exc.retry_after_s if isinstance(exc, SourceUnavailable) else None
        breaker.record_failure(exc.reason, retry_after)
        return exc

    async def _collect(
        self,
        member: IndexSource,
        records: AsyncIterator[CdxRecord],
        query: CaptureQuery,
        gate: cdxops.Gate | None,
    ) -> list[CdxRecord]:
        """``records`` gated and processed by the query (at most ``limit``); the caller
        sets the deadline."""
        stream = cdxops.process(records, query, tag=member.name, gate=gate)
        try:
            collected = [record async for record in stream]
        finally:
            await stream.aclose()
        self.breakers[member.name].record_success()
        return collected

    async def _lookup_one(
        self,
        member: IndexSource,
        query: CaptureQuery,
        deadline: float,
        gate: cdxops.Gate | None,
    ) -> Lookup:
        breaker = self.breakers[member.name]
        try:
            breaker.check(member.name)
        except SourceSkipped as exc:
            return _failed(member.name, exc)
        records = member.lookup(query)
        stream: AsyncIterator[CdxRecord]
        if isinstance(records, cdxops.LocalScan):
            # A local file: take its answer at once, up to the scan's first checkpoint.
            scan = cdxops.process_scan(records.scan, query, tag=member.name, gate=gate)
            taken: list[CdxRecord] = []
            try:
                for record in scan:
                    if record is None:
                        break  # a long scan: the rest streams (ResumedScan)
                    taken.append(record)
                else:
                    breaker.record_success()
                    rest = iter(taken)
                    first = next(rest, None)
                    return Lookup(
                        cdxops.RecordList(rest), {}, False, first, {member.name: "ok"}, member.name
                    )
            except SourceError as exc:
                if not taken:
                    return _failed(member.name, self._fail(member, exc))
                # As a streamed answer that fails after its first record: what came is served.
                logger.warning("source %s failed mid-stream: %s", member.name, exc.reason)
                breaker.record_success()
                return Lookup(
                    cdxops.RecordList(taken[1:]),
                    first=taken[0],
                    outcomes={member.name: "ok"},
                    streamed_from=member.name,
                )
            stream = cdxops.ResumedScan(taken, scan)
        else:
            stream = cdxops.process(records, query, tag=member.name, gate=gate)
        try:
            remaining_s = max(deadline - asyncio.get_running_loop().time(), 0.0)
            first = await _first_within(stream, remaining_s)
        except (TimeoutError, SourceError) as exc:
            await stream.aclose()
            return _failed(member.name, self._fail(member, exc))
        except BaseException:
            await stream.aclose()
            raise
        breaker.record_success()
        return Lookup(stream, {}, False, first, {member.name: "ok"}, streamed_from=member.name)

    def describe_members(self) -> list[tuple[str, str]]:
        return [(member.name, member.describe()) for member in self.members]

    async def aclose(self) -> None:
        for member in self.members:
            await member.aclose()


async def _first_within(stream: AsyncIterator[CdxRecord], timeout_s: float) -> CdxRecord | None:
    """The first record of ``stream`` within ``timeout_s`` seconds; None when it is empty.

    Started eagerly (:func:`gateway.index.eager.run_within`): a local index has its
    first record before it ever waits, and then no timer is armed. Raises
    TimeoutError past the deadline, and what the stream raises.
    """
    step = cast("Coroutine[Any, Any, CdxRecord]", stream.__anext__())
    try:
        return await run_within(step, timeout_s)
    except StopAsyncIteration:
        return None


def _failed(name: str, error: SourceError) -> Lookup:
    """The answer of a single member that failed, or refused the query (``refusal``)."""
    failure = {name: error.reason}
    refused = isinstance(error, SourceRefused)
    answer = Lookup(cdxops.RecordList(), failure, not refused, None, dict(failure))
    answer.refusal = error if isinstance(error, SourceRefused) else None
    return answer


def _ok(count: int) -> str:
    return f"ok: {count} capture{'' if count == 1 else 's'}"


def _merge(results: dict[int, list[CdxRecord]], query: CaptureQuery) -> list[CdxRecord]:
    """Merge per-member answers (each already ordered and limited) into one list."""
    items: list[tuple[object, CdxRecord]] = []
    if query.sort == "closest" and query.closest:
        target = cdxops.timestamp_to_seconds(query.closest)
        for position, records in results.items():
            for order, record in enumerate(records):
                distance = abs(cdxops.timestamp_to_seconds(record.timestamp) - target)
                items.append(((distance, position, order), record))
        items.sort(key=lambda item: item[0])  # type: ignore[arg-type,return-value]
        return [record for _, record in items[: query.limit]]
    streams = [
        [
            (record.urlkey, record.timestamp, position, order, record)
            for order, record in enumerate(r)
        ]
        for position, r in sorted(results.items())
    ]
    if query.sort == "reverse":
        merged = heapq.merge(*streams, key=lambda t: (t[0], t[1], -t[2], -t[3]), reverse=True)
    else:
        merged = heapq.merge(*streams, key=lambda t: (t[0], t[1], t[2], t[3]))
    out: list[CdxRecord] = []
    for item in merged:
        if len(out) >= query.limit:
            break
        out.append(item[4])
    return out
