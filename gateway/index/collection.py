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

from gateway.access.policy import AccessPolicy, check_not_blocked
from gateway.cdx import cdxops
from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery, CdxFilter
from gateway.errors import (
    AllSourcesFailed,
    ArchiveFileNotFound,
    ArchiveUnavailable,
    CapturesUnavailable,
    LoadError,
    NotFound,
    PlaceUnreachable,
    RecordFramingError,
    SourceRefused,
    SourceSkipped,
    UpstreamStatusError,
    UpstreamUnreachable,
)
from gateway.index.breaker import Breaker
from gateway.index.eager import run_within
from gateway.index.fuzzy import FUZZY_FIELD, FuzzyRules, Widened
from gateway.index.group import IndexGroup, Lookup
from gateway.loaders.base import (
    FindOriginal,
    LoadContext,
    LoadedRecord,
    ResourceLoader,
    WrappedRequest,
)

__all__ = [
    "Collection",
    "ServedStats",
    "Step",
    "StepRecorder",
    "find_record",
    "fuzzy_lookup",
    "load_capture",
    "original_finder",
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
    ``load_breakers`` holds a :class:`Breaker` per loader (by its
    ``describe()``), fed only by the places a loader could not reach (see
    :func:`find_record`): ``/_ready``, ``/_status`` and ``/metrics`` read
    them as they read the index sources' breakers.
    """

    name: str
    index: IndexGroup
    loaders: list[ResourceLoader]
    recorder: StepRecorder | None = None
    load_timeout_s: float = 30.0
    served: ServedStats = field(default_factory=ServedStats)
    load_breakers: dict[str, Breaker] = field(default_factory=dict)
    #: ``id(loader)`` -> its name and breaker: ``describe()`` runs once per loader.
    _by_loader: dict[int, tuple[str, Breaker]] = field(default_factory=dict, repr=False)

    def load_breaker(self, loader: ResourceLoader) -> tuple[str, Breaker]:
        """The name and breaker of ``loader``, one of :attr:`loaders` (made on first use)."""
        found = self._by_loader.get(id(loader))
        if found is None:
            name = loader.describe()
            breaker = self.load_breakers.setdefault(name, Breaker())
            found = self._by_loader[id(loader)] = (name, breaker)
        return found

    async def aclose(self) -> None:
        if self.recorder is not None:
            await self.recorder.aclose()
        await self.index.aclose()


@dataclass(slots=True)
class Collection:
    """A named collection: steps tried in order (one step when not a ``sequence``;
    never none).

    ``fuzzy`` holds the rules that widen an empty exact lookup
    (:mod:`gateway.index.fuzzy`); None turns fuzzy matching off. ``access``
    is the collection's access policy, also held by every step's index group
    (where it is enforced: :mod:`gateway.index.group`); None: no access control.
    """

    name: str
    steps: list[Step]
    is_sequence: bool = False
    fuzzy: FuzzyRules | None = None
    access: AccessPolicy | None = None

    def widen(self, query: CaptureQuery) -> Widened | None:
        """The fuzzy lookup to try when ``query`` found nothing in any step, if any."""
        return self.fuzzy.widen(query) if self.fuzzy is not None else None

    async def lookup(self, query: CaptureQuery) -> tuple[Step | None, Lookup]:
        """The first step whose answer is not empty, and that answer.

        Errors of every step tried are carried in ``Lookup.errors``. When no
        step answered and every source of every step failed, raises
        :class:`AllSourcesFailed` (HTTP 503) instead of claiming "no captures";
        when every source refused the query as the client's error, raises the
        first refusal (:class:`~gateway.errors.SourceRefused`, a 4xx).
        A step that is empty or failed falls through to the next (unlike pywb,
        whose Index API stops at the first step of a sequence). When no step
        has a capture, the steps are asked again, in order, for the fuzzy
        lookup (:meth:`widen`), each under the deadline of its exact lookup;
        its captures carry ``is_fuzzy``.
        """
        steps = self.steps
        first_step = steps[0]
        deadlines = [first_step.index.deadline()]  # each step's, shared by its fuzzy retry
        answer = await first_step.index.lookup(query, deadline=deadlines[0])
        if answer.first is not None:
            return first_step, answer  # the first step answered: its own errors and outcomes
        errors: dict[str, str] = {}
        outcomes: dict[str, str] = {}
        failed_all = True
        refusals = _Refusals()
        for number, step in enumerate(steps):
            if number:
                deadlines.append(step.index.deadline())
                answer = await step.index.lookup(query, deadline=deadlines[-1])
            errors.update(answer.errors)
            outcomes.update(answer.outcomes)
            if answer.first is not None:
                answer.errors = errors
                answer.outcomes = outcomes
                return step, answer
            failed_all = failed_all and (answer.failed_all or answer.refusal is not None)
            refusals.add(answer)
        refusals.raise_if_all(errors)
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
        try:
            async for record in answer:
                check_not_blocked(record)  # the original of a revisit is checked too
                yield record
        finally:
            await answer.aclose()


async def find_record(
    collection: Collection,
    query: CaptureQuery,
    request: WrappedRequest | None = None,
    *,
    gzip_member: bool = False,
) -> tuple[Step, LoadedRecord, dict[str, str]]:
    """Look up ``query`` step by step and load the first capture that loads.

    A step whose captures all fail to load falls through to the next step
    (pywb ``HandlerSeq``), except to a step that records: a capture that
    exists but could not be loaded (its place unreachable, its file missing
    or unreadable) is never recorded again as if it were not archived. When
    no step has a capture at all, the steps are tried again with the
    collection's fuzzy lookup (pywb ``FuzzyMatcher``;
    :mod:`gateway.index.fuzzy`). Returns the step, the loaded record (the
    caller must ``aclose`` it) and the failures met on the way;
    ``gzip_member`` asks loaders for the stored gzip member
    (:attr:`LoadContext.gzip_member`).

    Raises :class:`CapturesUnavailable` (503) when captures were found and
    none loaded while some failed for want of their place: an
    :class:`~gateway.errors.ArchiveUnavailable` other than an upstream 4xx (a
    place unreachable, a file that cannot be read, the store's own file
    missing), a WARC file missing or known to no resolver, a load timeout, a
    loader skipped by its breaker (pywb's warcserver answers 503 for a
    missing WARC file as well); :class:`NotFound` (404) listing every failure
    when no capture loads otherwise (records damaged everywhere, revisits
    unresolved, self-redirects, unsafe names, ...), except
    :class:`~gateway.errors.RecordFramingError` (502, naming each file and
    offset) when every capture that failed is a record whose length cannot be
    read; :class:`AllSourcesFailed` (503) when every source of every step
    failed, or the first :class:`~gateway.errors.SourceRefused` (a 4xx) when
    every one refused the query as the client's error;
    :class:`~gateway.errors.AccessBlocked` (451) when the first capture tried,
    or the original of a revisit, is listed ``access: block`` (pywb
    ``ResourceHandler``: the first capture not allowed stops the load).
    Places that could not be reached (:class:`~gateway.errors.PlaceUnreachable`,
    an upstream archive unreachable or answering 5xx, a load timeout), and
    only they, feed the step's :attr:`Step.load_breakers`.
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
        seen.refusals.raise_if_all(errors)
        raise AllSourcesFailed(
            f"every source of collection {collection.name!r} failed; "
            "this is not an empty answer, retry later",
            errors,
        )
    if seen.unavailable:
        raise CapturesUnavailable(
            f"captures of {query.url} exist but none could be loaded: "
            f"{len(seen.unavailable)} could not be read where they are "
            f"({'; '.join(sorted(set(seen.unavailable.values())))[:400]}); "
            "this is not 'not archived', retry later",
            errors,
        )
    if seen.framing and seen.load_failed <= seen.framing:
        # Every capture is a record whose length cannot be read: a broken archive
        # file (502), neither "not archived" (404) nor "down" (503).
        raise RecordFramingError(
            f"no capture of {query.url} could be loaded: each is a record whose length "
            f"cannot be read ({'; '.join(sorted(set(seen.framing_reasons)))[:1000]})",
            errors,
        )
    message = (
        f"no capture of {query.url} could be loaded"
        if seen.captures
        else f"no captures of {query.url} in collection {collection.name!r}"
    )
    raise NotFound(message, errors)


class _Refusals:
    """Whether every step's sources refused a lookup as the client's error
    (:attr:`Lookup.refusal`), and the first refusal."""

    __slots__ = ("every", "first")

    def __init__(self) -> None:
        self.every = True
        self.first: SourceRefused | None = None

    def add(self, answer: Lookup) -> None:
        if answer.refusal is None:
            self.every = False
        elif self.first is None:
            self.first = answer.refusal

    def raise_if_all(self, errors: dict[str, str]) -> None:
        """Raise the first refusal, listing every source's in ``errors``, when every
        step's answer was one."""
        if self.every and self.first is not None:
            self.first.errors = dict(errors)
            raise self.first


class _Seen:
    """What :func:`_first_loadable` met: any capture, whether every source failed,
    and the captures that failed for want of their place (``{capture: reason}``)."""

    __slots__ = (
        "captures",
        "deadlines",
        "failed_all",
        "framing",
        "framing_reasons",
        "load_failed",
        "refusals",
        "unavailable",
    )

    def __init__(self) -> None:
        self.captures = False
        self.failed_all = True
        self.refusals = _Refusals()
        self.unavailable: dict[str, str] = {}
        #: Captures that failed to load, those that failed for their framing
        #: (:class:`RecordFramingError`), and why (two captures may share a name).
        self.load_failed: set[str] = set()
        self.framing: set[str] = set()
        self.framing_reasons: list[str] = []
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
        if step.recorder is not None and seen.unavailable:
            break  # recording again what exists but cannot be read now would duplicate it
        deadline = seen.deadlines.setdefault(position, step.index.deadline())
        ctx = LoadContext(
            request_url=query.url,
            find_original=_OriginalFinder(step),
            request=request,
            gzip_member=gzip_member,
        )
        if widened is None:
            recorder = step.recorder
            if (
                recorder is not None
                and recorder.skip_if_updated_days is not None
                and (collection.access is None or collection.access.allows_now(query.key))
            ):
                recent = await recorder.recent(query.url, ctx)
                if recent is not None:
                    return step, recent
            answer = await step.index.lookup(query, deadline=deadline)
        else:
            answer = await fuzzy_lookup(step.index, widened, deadline=deadline)
        errors.update(answer.errors)
        seen.failed_all = seen.failed_all and (answer.failed_all or answer.refusal is not None)
        seen.refusals.add(answer)
        try:
            async for capture in answer:
                seen.captures = True
                check_not_blocked(capture)
                loaded = await _load_capture(step, capture, ctx, errors, seen)
                if loaded is not None:
                    if step.recorder is not None and step.recorder.wants(capture):
                        loaded = step.recorder.wrap(loaded, ctx.request)
                    return step, loaded
        finally:
            await answer.aclose()
    return None


def _unavailable(exc: LoadError) -> bool:
    """True when ``exc`` says the record could not be read where it should be, not
    what it holds: an :class:`ArchiveUnavailable` (except an upstream archive's 4xx)
    or a WARC file missing (:class:`ArchiveFileNotFound`: pywb answers 503 too)."""
    if isinstance(exc, UpstreamStatusError):
        return exc.status_code >= 500
    return isinstance(exc, ArchiveUnavailable | ArchiveFileNotFound)


def _down(exc: LoadError) -> bool:
    """True when ``exc`` says the place itself was not reached: a fault of the place,
    never of one record or of the client's input (what a breaker may count)."""
    if isinstance(exc, UpstreamStatusError):
        return exc.status_code >= 500
    return isinstance(exc, PlaceUnreachable | UpstreamUnreachable)


async def _load_capture(
    step: Step, capture: CdxRecord, ctx: LoadContext, errors: dict[str, str], seen: _Seen
) -> LoadedRecord | None:
    accepted = False
    name = _capture_name(capture)
    for loader in step.loaders:
        if not loader.accepts(capture):
            continue
        accepted = True
        where, breaker = step.load_breaker(loader)
        try:
            breaker.check(where)
            # Started eagerly: a local record loads without a timer being armed.
            loaded = await run_within(loader.load(capture, ctx), step.load_timeout_s)
        except SourceSkipped as exc:
            errors[name] = seen.unavailable[name] = exc.reason
            seen.load_failed.add(name)
        except LoadError as exc:
            errors[name] = exc.message
            seen.load_failed.add(name)
            if isinstance(exc, RecordFramingError):
                seen.framing.add(name)
                seen.framing_reasons.append(exc.message)
            if _unavailable(exc):
                seen.unavailable[name] = exc.message
            if _down(exc):
                breaker.record_failure(exc.message)
        except TimeoutError:
            seen.load_failed.add(name)
            errors[name] = seen.unavailable[name] = (
                f"load timeout after {step.load_timeout_s:g} s ({loader.describe()})"
            )
            breaker.record_failure(errors[name], timed_out=True)
        else:
            breaker.record_success()
            return loaded
    if not accepted:
        seen.load_failed.add(name)
        errors[name] = (
            f"no resource loader of step {step.name!r} can load filename "
            f"{capture.filename or '-'!r}; configure 'resource:' for it"
        )
    return None


def original_finder(step: Step) -> FindOriginal:
    """``find_original`` for ``step``: its non-revisit captures of a URL with a payload
    digest, closest to a time first, through ``step.index`` (what revisits are
    resolved with, pywb ``load_cdx_for_dupe``)."""
    return _OriginalFinder(step)


async def load_capture(
    step: Step, capture: CdxRecord, ctx: LoadContext
) -> tuple[LoadedRecord | None, dict[str, str]]:
    """Load this one ``capture`` with ``step``'s loaders, as :func:`find_record` loads each.

    The same loaders in order, breakers and ``load_timeout_s``; no fuzzy
    retry, no other capture, no recording. Returns the record (the caller
    must ``aclose`` it) and ``{}``, or None and ``{capture: why}`` when no
    loader could load it (the failure is never raised).
    """
    errors: dict[str, str] = {}
    return await _load_capture(step, capture, ctx, errors, _Seen()), errors
