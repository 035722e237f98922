"""Collections: steps tried in order, and the one lookup that loads a record.

A :class:`Step` is an index group plus its resource loaders (and a recorder
when it records); a :class:`Collection` is a list of steps tried in order
(pywb ``sequence``; unlike pywb, an empty or failed step falls through to the
next for the Index API too). When no step has a capture of an exact lookup,
the collection's fuzzy rules may widen it (:func:`fuzzy_lookup`,
:mod:`gateway.index.fuzzy`). :func:`find_record` is the Resource API's and
the raw mementos' lookup: captures step by step, each with its step's
loaders, until one loads.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from gateway.cdx import cdxops
from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery, CdxFilter
from gateway.errors import AllSourcesFailed, LoadError, NotFound
from gateway.index.eager import run_within
from gateway.index.fuzzy import FUZZY_FIELD, FuzzyRules, Widened
from gateway.index.group import IndexGroup, Lookup
from gateway.loaders.base import LoadContext, LoadedRecord, ResourceLoader, WrappedRequest

__all__ = [
    "Collection",
    "ServedStats",
    "Step",
    "StepRecorder",
    "find_record",
    "fuzzy_lookup",
]

logger = logging.getLogger(__name__)


class ServedStats:
    """Records served from one step's captures (Resource API and raw mementos)."""

    __slots__ = ("bytes", "records")

    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0

    def served(self, size: int) -> None:
        """Count one record whose ``size`` bytes were sent."""
        self.records += 1
        self.bytes += size


class StepRecorder(Protocol):
    """What a recording step asks of its recorder (:class:`gateway.server.recording.Recorder`).

    ``skip_if_updated_days``: a recent capture is served from the store
    instead of being fetched again (None: always fetch); ``recent`` loads it;
    ``wants`` tells whether a capture's record is recorded and ``wrap`` tees
    it into the store as it is served.
    """

    @property
    def skip_if_updated_days(self) -> float | None: ...

    async def recent(self, url: str, ctx: LoadContext) -> LoadedRecord | None: ...

    def wants(self, capture: CdxRecord) -> bool: ...

    def wrap(self, loaded: LoadedRecord, request: WrappedRequest) -> LoadedRecord: ...

    async def aclose(self) -> None: ...


@dataclass(slots=True)
class Step:
    """One step of a collection: an index (group) and the loaders for its captures.

    ``recorder`` is set when the step or one of its members has ``record: true``;
    ``load_timeout_s`` bounds loading one capture's record (its headers, and
    for remote and live captures the spooled payload) before the next is tried.
    ``served`` counts the records sent from this step's captures (``/metrics``).
    """

    name: str
    index: IndexGroup
    loaders: list[ResourceLoader]
    recorder: StepRecorder | None = None
    load_timeout_s: float = 30.0
    served: ServedStats = field(default_factory=ServedStats)

    async def aclose(self) -> None:
        if self.recorder is not None:
            await self.recorder.aclose()
        await self.index.aclose()


@dataclass(slots=True)
class Collection:
    """A named collection: steps tried in order (one step when not a ``sequence``).

    ``fuzzy`` holds the rules that widen an empty exact lookup
    (:mod:`gateway.index.fuzzy`); None turns fuzzy matching off.
    """

    name: str
    steps: list[Step]
    is_sequence: bool = False
    fuzzy: FuzzyRules | None = None

    def widen(self, query: CaptureQuery) -> Widened | None:
        """The fuzzy lookup to try when ``query`` found nothing in any step, if any."""
        return self.fuzzy.widen(query) if self.fuzzy is not None else None

    async def lookup(self, query: CaptureQuery) -> tuple[Step | None, Lookup]:
        """The first step whose answer is not empty, and that answer.

        Errors of every step tried are carried in ``Lookup.errors``. When no
        step answered and every source of every step failed, raises
        :class:`AllSourcesFailed` (HTTP 503) instead of claiming "no captures".
        A step that is empty or failed falls through to the next (unlike pywb,
        whose Index API stops at the first step of a sequence). When no step
        has a capture, the steps are asked again, in order, for the fuzzy
        lookup (:meth:`widen`), each under the deadline of its exact lookup;
        its captures carry ``is_fuzzy``.
        """
        errors: dict[str, str] = {}
        outcomes: dict[str, str] = {}
        failed_all = True
        deadlines: list[float] = []  # each step's, shared by its fuzzy retry
        for step in self.steps:
            deadlines.append(step.index.deadline())
            answer = await step.index.lookup(query, deadline=deadlines[-1])
            if answer.first is not None and not outcomes and not errors:
                return step, answer  # the first step answered: its own errors and outcomes
            errors.update(answer.errors)
            outcomes.update(answer.outcomes)
            if answer.first is not None:
                answer.errors = errors
                answer.outcomes = outcomes
                return step, answer
            failed_all = failed_all and answer.failed_all
        if failed_all and errors:
            raise AllSourcesFailed(
                f"every source of collection {self.name!r} failed; "
                "this is not an empty answer, retry later",
                errors,
            )
        widened = self.widen(query)
        if widened is not None:
            for step, deadline in zip(self.steps, deadlines, strict=True):
                answer = await fuzzy_lookup(step.index, widened, deadline=deadline)
                errors.update(answer.errors)
                if answer.first is not None:
                    answer.errors = errors
                    answer.outcomes = outcomes
                    return step, answer
        return None, Lookup(cdxops.RecordList(), errors, outcomes=outcomes)

    async def aclose(self) -> None:
        for step in self.steps:
            await step.aclose()


async def fuzzy_lookup(
    index: IndexGroup, widened: Widened, *, deadline: float | None = None
) -> Lookup:
    """``index``'s answer to a widened lookup: the captures ``widened`` accepts.

    ``deadline``: the exact lookup's (:meth:`IndexGroup.lookup`), so the
    retry does not wait on a member past it.

    At most the original query's limit of them, each marked ``is_fuzzy: "1"``
    (pywb ``FuzzyMatcher.get_fuzzy_iter``). ``first`` is None when none is
    accepted; errors and outcomes are the widened lookup's.
    """
    answer = await index.lookup(widened.query, deadline=deadline)
    if answer.first is None:
        return answer
    accepted = _Accepted(answer, widened)
    try:
        first = await anext(accepted, None)
    except BaseException:
        await answer.aclose()
        raise
    if first is None:
        await answer.aclose()
    return Lookup(
        accepted,
        answer.errors,
        first=first,
        outcomes=answer.outcomes,
        streamed_from=answer.streamed_from,
    )


class _Accepted:
    """The captures of a widened answer that stand in for the original URL."""

    __slots__ = ("_answer", "_left", "_records", "_widened")

    def __init__(self, answer: Lookup, widened: Widened) -> None:
        self._answer = answer
        self._records = aiter(answer)
        self._widened = widened
        self._left = widened.original.limit

    def __aiter__(self) -> _Accepted:
        return self

    async def __anext__(self) -> CdxRecord:
        if self._left > 0:
            async for capture in self._records:
                if self._widened.accepts(capture):
                    self._left -= 1
                    capture.fields[FUZZY_FIELD] = "1"
                    return capture
            self._left = 0
        raise StopAsyncIteration

    async def aclose(self) -> None:
        await self._answer.aclose()


_NOT_REVISIT = CdxFilter.parse("!mime:warc/revisit")


def _capture_name(capture: CdxRecord) -> str:
    return f"{capture.source or '?'} {capture.timestamp} {capture.url}"


class _OriginalFinder:
    """``find_original`` for one step: non-revisit captures of a URL with a
    payload digest, closest to a time first (pywb ``load_cdx_for_dupe``)."""

    def __init__(self, step: Step) -> None:
        self.step = step

    def __call__(self, url: str, timestamp: str, digest: str) -> AsyncIterator[CdxRecord]:
        return self._find(url, timestamp, digest)

    async def _find(self, url: str, timestamp: str, digest: str) -> AsyncIterator[CdxRecord]:
        filters = [_NOT_REVISIT]
        bare = digest.split(":", 1)[-1] if digest and digest != "-" else ""
        if bare:
            filters.append(CdxFilter("digest", "contains", bare, False))
        try:
            # the URL of an archived record: looked up as archived, not checked
            query = CaptureQuery.for_url(
                url, closest=timestamp, filters=filters, limit=20, check=False
            )
        except ValueError:
            return
        answer = await self.step.index.lookup(query)
        async for record in answer:
            yield record


async def find_record(
    collection: Collection,
    query: CaptureQuery,
    request: WrappedRequest | None = None,
    *,
    gzip_member: bool = False,
) -> tuple[Step, LoadedRecord, dict[str, str]]:
    """Look up ``query`` step by step and load the first capture that loads.

    A step whose captures all fail to load falls through to the next step
    (pywb ``HandlerSeq``). When no step has a capture at all, the steps are
    tried again with the collection's fuzzy lookup (pywb ``FuzzyMatcher``;
    :mod:`gateway.index.fuzzy`). Returns the step, the loaded record (the caller
    must ``aclose`` it) and the failures met on the way; ``gzip_member``
    asks loaders for the stored gzip member (:attr:`LoadContext.gzip_member`).
    Raises
    :class:`NotFound` (404) listing every failure when no capture loads, or
    :class:`AllSourcesFailed` (503) when every source of every step failed.
    """
    errors: dict[str, str] = {}
    seen = _Seen()
    context = request or WrappedRequest()
    found = await _first_loadable(collection, query, context, errors, seen, None, gzip_member)
    if found is None and not seen.captures and not (seen.failed_all and errors):
        widened = collection.widen(query)
        if widened is not None:
            found = await _first_loadable(
                collection, query, context, errors, seen, widened, gzip_member
            )
    if found is not None:
        return found[0], found[1], errors
    if seen.failed_all and errors and not seen.captures:
        raise AllSourcesFailed(
            f"every source of collection {collection.name!r} failed; "
            "this is not an empty answer, retry later",
            errors,
        )
    message = (
        f"no capture of {query.url} could be loaded"
        if seen.captures
        else f"no captures of {query.url} in collection {collection.name!r}"
    )
    raise NotFound(message, errors)


class _Seen:
    """What :func:`_first_loadable` met: any capture, and whether every source failed."""

    __slots__ = ("captures", "deadlines", "failed_all")

    def __init__(self) -> None:
        self.captures = False
        self.failed_all = True
        #: Each step's lookup deadline, set by the exact lookup and kept by
        #: the fuzzy retry (one deadline per request and step).
        self.deadlines: dict[int, float] = {}


async def _first_loadable(
    collection: Collection,
    query: CaptureQuery,
    request: WrappedRequest,
    errors: dict[str, str],
    seen: _Seen,
    widened: Widened | None,
    gzip_member: bool,
) -> tuple[Step, LoadedRecord] | None:
    """The first capture that loads, step by step, for ``query`` or its ``widened`` form."""
    for position, step in enumerate(collection.steps):
        deadline = seen.deadlines.setdefault(position, step.index.deadline())
        ctx = LoadContext(
            request_url=query.url,
            find_original=_OriginalFinder(step),
            request=request,
            gzip_member=gzip_member,
        )
        if widened is None:
            recorder = step.recorder
            if recorder is not None and recorder.skip_if_updated_days is not None:
                recent = await recorder.recent(query.url, ctx)
                if recent is not None:
                    return step, recent
            answer = await step.index.lookup(query, deadline=deadline)
        else:
            answer = await fuzzy_lookup(step.index, widened, deadline=deadline)
        errors.update(answer.errors)
        seen.failed_all = seen.failed_all and answer.failed_all
        try:
            async for capture in answer:
                seen.captures = True
                loaded = await _load_capture(step, capture, ctx, errors)
                if loaded is not None:
                    if step.recorder is not None and step.recorder.wants(capture):
                        loaded = step.recorder.wrap(loaded, ctx.request)
                    return step, loaded
        finally:
            await answer.aclose()
    return None


async def _load_capture(
    step: Step, capture: CdxRecord, ctx: LoadContext, errors: dict[str, str]
) -> LoadedRecord | None:
    accepted = False
    for loader in step.loaders:
        if not loader.accepts(capture):
            continue
        accepted = True
        try:
            # Started eagerly: a local record loads without a timer being armed.
            return await run_within(loader.load(capture, ctx), step.load_timeout_s)
        except LoadError as exc:
            errors[_capture_name(capture)] = exc.message
        except TimeoutError:
            errors[_capture_name(capture)] = (
                f"load timeout after {step.load_timeout_s:g} s ({loader.describe()})"
            )
    if not accepted:
        errors[_capture_name(capture)] = (
            f"no resource loader of step {step.name!r} can load filename "
            f"{capture.filename or '-'!r}; configure 'resource:' for it"
        )
    return None
