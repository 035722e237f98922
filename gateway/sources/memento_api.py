"""A remote Memento archive (RFC 7089) as an index source (pywb ``MementoIndexSource``).

Configured as ``memento+URL`` or a plain ``http(s)://`` URL (pywb
``MementoIndexSource.from_timegate_url``):
TimeGate ``URL{url}``, TimeMap ``URL`` + ``timemap/link/{url}``, raw mementos
``URL{timestamp}id_/{url}``; or as a mapping with ``timegate_url``,
``timemap_url``, ``replay_url`` templates (``{url}``, ``{timestamp}``) and
``timemap_page_budget``.

How a lookup is answered:

- **TimeGate** (RFC 7089 §4, patterns 2.1 and 2.2) when the query has ``closest``, a
  ``limit`` of at most :data:`TIMEGATE_MAX_LIMIT`, ``matchType=exact`` and no
  filters or from/to: one ``HEAD`` with ``Accept-Datetime`` selects a memento
  (the ``Location`` of a 302, the ``Content-Location`` of a 200, or the
  ``rel="memento"`` link), and the ``prev``/``next``/``first``/``last`` memento
  links of the TimeGate and memento responses (``HEAD`` of the mementos at the
  edge, at most ``limit + 2`` requests) extend it to the ``limit`` captures
  closest in time. When the archive's links do not chain (pywb's memento
  responses name no neighbours) and more than one capture is asked for, the
  lookup falls back to the TimeMap, so the answer is never a wrong subset.
- **TimeMap** (RFC 7089 §5, ``application/link-format``) otherwise: one
  record per ``rel="memento"`` link. Paged TimeMaps (RFC 7089 §5
  ``rel="timemap"`` links carrying ``from``/``until``, and the non-standard
  ``rel="next"``) are followed breadth-first up to ``timemap_page_budget``
  pages; pages already read are never read again (self links cannot loop);
  pages whose ``from``/``until`` lie outside the query's ``from``/``to`` are
  skipped. When the budget stops the walk, the answer is what the pages read
  hold and a WARNING is logged.

Each record: ``urlkey`` from the original URL (:func:`canonical_urlkey`),
``timestamp`` from the memento's ``datetime``, ``url`` the original (or the
URL embedded in a wayback-style memento URI ``.../{timestamp}{mod}_/{url}``
when it has the same urlkey: one TimeMap may list captures of ``http://a/``
and ``http://www.a/``), ``load_url`` the replay template filled with that
timestamp and URL (or the memento URI itself when it already is an ``id_``
URI). ``mime`` and ``status`` are unknown and left out. Records are yielded
sorted by (urlkey, timestamp), ties by ``url`` (a TimeMap need not be
sorted), duplicates (the same memento URI on two pages) once, only inside
``[query.key, query.end_key)``. Memento answers are about one URL: prefix,
host and domain queries ask about ``query.url`` alone, as pywb does.

Errors: connection failures, HTTP 5xx, 429 and other error statuses raise
:class:`SourceUnavailable` (``retry_after_s`` from ``Retry-After``); a 404 or
410 from the TimeGate or the first TimeMap page is "no captures"; an answer
that is not link-format, a Link header that does not parse, or a TimeMap with
memento links of which none has a valid ``datetime`` raise
:class:`SourceBadAnswer`. What the client's URL causes is the client's error,
:class:`~gateway.errors.SourceRefused` (a 4xx that never opens the circuit
breaker, :mod:`gateway.sources.upstream`): a URL with a scheme other than
``http``/``https`` (``javascript:alert(1)``, ``mailto:``, ``urn:``) is refused
before anything is sent, as is one that makes a TimeGate or TimeMap URL that
cannot be requested; a 4xx other than 404, 410, 401, 407, 408 and 429 from the
TimeGate or the first TimeMap page (an archive answering ``400 Bad Request``
about the URL) is passed on. The same statuses on a later TimeMap page, whose
URL the archive gave, are the archive's fault (:class:`SourceUnavailable`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import zlib
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import ClassVar, Final
from urllib.parse import urljoin

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.cdx.memento import (
    Link,
    http_date_to_timestamp,
    parse_link_format,
    parse_link_header,
    retry_after_seconds,
)
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import SourceBadAnswer, SourceRefused, SourceUnavailable
from gateway.loaders.base import ResourceLoader
from gateway.loaders.replay import ReplayLoader
from gateway.sources.base import IndexSource, SourceConfig
from gateway.sources.memento_config import (
    DEFAULT_TIMEMAP_PAGE_BUDGET,
    MementoSourceConfig,
    fill_template,
)
from gateway.sources.memento_walk import Memento, TimeGateWalk, memento_from_link
from gateway.sources.upstream import body_excerpt, is_refusal, refusal

__all__ = [
    "DEFAULT_TIMEMAP_PAGE_BUDGET",
    "TIMEGATE_MAX_LIMIT",
    "MementoSource",
    "MementoSourceConfig",
]

logger = logging.getLogger(__name__)

#: Largest ``limit`` (with ``closest``) answered through the TimeGate.
TIMEGATE_MAX_LIMIT: Final = 10
#: Largest TimeMap page read (after decompression).
MAX_PAGE_BYTES: Final = 64 * 1024 * 1024
_CHUNK_BYTES: Final = 64 * 1024
#: Larger TimeMap pages are parsed, and more mementos turned into records, in a
#: worker thread (about 5 us of CPU per memento link) instead of the event loop.
_THREAD_TEXT_CHARS: Final = 256 * 1024
_THREAD_MEMENTOS: Final = 2000
_ID_MEMENTO = re.compile(r"/\d{14}id_/")
#: ``/{1-14 digits}{optional modifier_}/{absolute URL}`` in a wayback-style memento URI.
_WAYBACK_PATH = re.compile(r"/\d{1,14}(?:[a-z]{2}_)?/([A-Za-z][A-Za-z0-9+.\-]*:/.*)$")
#: A URL's scheme, unless what precedes the colon is a host before its port
#: (``example.com:8080/``, read as ``http://`` as SURT reads it).
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):(?![0-9]+(?:[/?#]|$))")


class MementoSource:
    """A remote Memento TimeGate/TimeMap as an index (see the module docstring)."""

    config_type: ClassVar[type[SourceConfig]] = MementoSourceConfig
    #: A plain http(s) URL is a TimeGate prefix too (pywb ``init_from_string``).
    shorthand_prefixes: ClassVar[tuple[str, ...]] = ("memento+", "http://", "https://")

    def __init__(self, config: MementoSourceConfig, *, name: str, clients: SharedClients) -> None:
        self.config = config
        self.name = name
        self.clients = clients
        self._loader = ReplayLoader(name=name, clients=clients)

    @classmethod
    def from_config(cls, config: SourceConfig, *, name: str, clients: SharedClients) -> IndexSource:
        """Build from a :class:`MementoSourceConfig` (no I/O)."""
        if not isinstance(config, MementoSourceConfig):
            raise TypeError(f"expected MementoSourceConfig, got {type(config).__name__}")
        return cls(config, name=name, clients=clients)

    async def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Yield the captures of ``query.url`` sorted by (urlkey, timestamp).

        Raises :class:`SourceUnavailable` or :class:`SourceBadAnswer` (module docstring).
        A widened (fuzzy) lookup yields nothing: a TimeMap holds one URL's
        mementos, so it cannot be searched by prefix (pywb's ``MementoIndexSource``
        refuses it too).
        """
        if query.key >= query.end_key or query.fuzzy:
            return
        self._check_scheme(query.url)
        found: tuple[str, list[Memento]] | None = None
        if _timegate_suits(query):
            assert query.closest is not None
            walk = TimeGateWalk(self, query.url, query.closest, query.limit)
            found = await walk.run()
        if found is None:
            found = await self._read_timemap(query)
        original, mementos = found
        if len(mementos) > _THREAD_MEMENTOS:
            records = await asyncio.to_thread(self._records, original, mementos, query)
        else:
            records = self._records(original, mementos, query)
        for record in records:
            yield record

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """A :class:`ReplayLoader` for this source's captures (their ``load_url``)."""
        return (self._loader,)

    def describe(self) -> str:
        """``memento TimeGate URL{url}, TimeMap ..., replay ...``."""
        c = self.config
        return (
            f"memento TimeGate {c.timegate_url}, TimeMap {c.timemap_url} "
            f"(up to {c.timemap_page_budget} pages), replay {c.replay_url}"
        )

    async def aclose(self) -> None:
        """Nothing to release: connections belong to the app's shared session."""

    def __repr__(self) -> str:
        return f"MementoSource({self.config.timegate_url!r}, name={self.name!r})"

    def _check_scheme(self, url: str) -> None:
        """Refuse (the client's error) a URL a Memento archive is not asked about:
        one whose scheme is not ``http`` or ``https`` (no scheme reads as ``http``).

        >>> source = MementoSource(MementoSourceConfig.from_shorthand("memento+http://arc/web/"),
        ...                        name="ia", clients=SharedClients())
        >>> source._check_scheme("iana.org:8080/about")
        >>> source._check_scheme("javascript:alert(1)")
        Traceback (most recent call last):
        gateway.errors.SourceRefused: ia: not asked: a Memento archive holds http(s) URLs, \
and this one's scheme is 'javascript'
        """
        match = _SCHEME.match(url)
        if match is not None and match.group(1).lower() not in ("http", "https"):
            raise SourceRefused(
                self.name,
                "not asked: a Memento archive holds http(s) URLs, and this one's scheme is "
                f"{match.group(1)[:20]!r}",
            )

    # ------------------------------------------------------------------ TimeMap
    async def _read_timemap(self, query: CaptureQuery) -> tuple[str, list[Memento]]:
        """Original URL and mementos of every TimeMap page read (module docstring)."""
        first_url = fill_template(self.config.timemap_url, query.url)
        queue: deque[str] = deque([first_url])
        queued = {first_url}
        original = ""
        mementos: list[Memento] = []
        bad_datetimes = 0
        pages = 0
        while queue and pages < self.config.timemap_page_budget:
            page_url = queue.popleft()
            pages += 1
            answer = await self._timemap_page(page_url, first=pages == 1)
            if answer is None:
                return query.url, []
            links, base = answer
            for link in links:
                if link.has_rel("memento"):
                    memento = memento_from_link(link, base)
                    if memento is None:
                        bad_datetimes += 1
                    else:
                        mementos.append(memento)
                elif link.has_rel("original"):
                    original = original or link.url
                elif _is_page_link(link, query):
                    target = urljoin(base, link.url)
                    if target not in queued:
                        queued.add(target)
                        queue.append(target)
        if queue:
            logger.warning(
                "memento source %s: the TimeMap of %s has more pages than "
                "timemap_page_budget=%d; answering from the %d pages read "
                "(%d linked pages not read; raise timemap_page_budget to read more)",
                self.name,
                query.url,
                self.config.timemap_page_budget,
                pages,
                len(queue),
            )
        if bad_datetimes and not mementos:
            raise SourceBadAnswer(
                self.name,
                f"TimeMap {first_url} lists {bad_datetimes} memento links and none has "
                'a valid datetime="..." (RFC 7089 §5 requires an HTTP date)',
            )
        return original or query.url, mementos

    async def _timemap_page(self, url: str, *, first: bool) -> tuple[list[Link], str] | None:
        """The links of one TimeMap page and the URL they are relative to (after
        redirects); None for a 404/410 first page."""
        headers = {"Accept": "application/link-format", "Accept-Encoding": "gzip, deflate"}
        target = self.request_url(url, "TimeMap", from_client=first)
        try:
            async with self.clients.session.get(
                target, headers=headers, allow_redirects=True
            ) as response:
                if response.status in (404, 410) and first:
                    return None
                if first and is_refusal(response.status):
                    detail = await body_excerpt(response)
                    raise refusal(self.name, response.status, f"TimeMap {url}", detail)
                self.raise_for_status(response.status, response.headers, "TimeMap", url)
                if response.status != 200:
                    raise SourceBadAnswer(
                        self.name, f"TimeMap {url} answered HTTP {response.status}; expected 200"
                    )
                text = await self._read_text(response, url)
                base = str(response.url)
        except aiohttp.ClientError as exc:
            raise self.unreachable("TimeMap", url, exc) from exc
        try:
            if len(text) > _THREAD_TEXT_CHARS:
                return await asyncio.to_thread(parse_link_format, text), base
            return parse_link_format(text), base
        except ValueError as exc:
            raise SourceBadAnswer(
                self.name, f"TimeMap {url} is not application/link-format: {exc}"
            ) from exc

    async def _read_text(self, response: aiohttp.ClientResponse, url: str) -> str:
        """The body (gzip/deflate undone), at most MAX_PAGE_BYTES, decoded."""
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise SourceBadAnswer(
                self.name, f"TimeMap {url}: unsupported Content-Encoding {encoding}"
            )
        inflater = None if encoding in ("", "identity") else zlib.decompressobj(wbits=47)
        parts: list[bytes] = []
        size = 0
        try:
            async for chunk in response.content.iter_chunked(_CHUNK_BYTES):
                if inflater is not None:
                    chunk = inflater.decompress(chunk, MAX_PAGE_BYTES + 1 - size)
                    if inflater.unconsumed_tail:
                        size = MAX_PAGE_BYTES + 1
                size += len(chunk)
                if size > MAX_PAGE_BYTES:
                    raise SourceBadAnswer(
                        self.name,
                        f"TimeMap {url} is larger than {MAX_PAGE_BYTES // (1024 * 1024)} MiB; "
                        "a paged TimeMap (rel=timemap from/until) is expected for so many mementos",
                    )
                parts.append(chunk)
        except zlib.error as exc:
            raise SourceBadAnswer(
                self.name, f"TimeMap {url}: corrupt {encoding} body: {exc}"
            ) from exc
        charset = response.charset or "utf-8"
        try:
            return b"".join(parts).decode(charset, errors="replace")
        except LookupError:
            return b"".join(parts).decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ shared
    def raise_for_status(
        self,
        status: int,
        headers: CIMultiDictProxy[str],
        what: str,
        url: str,
        *,
        from_client: bool = False,
    ) -> None:
        """Raise :class:`SourceUnavailable` for 4xx and 5xx (``Retry-After`` kept).

        With ``from_client`` (``url`` was made from the client's URL, not taken
        from the archive's links) a 4xx about the query raises
        :class:`SourceRefused` instead (:func:`gateway.sources.upstream.is_refusal`).
        """
        if from_client and is_refusal(status):
            raise refusal(self.name, status, f"{what} {url}")
        if status >= 400:
            retry = retry_after_seconds(headers.get("Retry-After"))
            raise SourceUnavailable(self.name, f"{what} {url} answered HTTP {status}", retry)

    def unreachable(self, what: str, url: str, exc: aiohttp.ClientError) -> SourceUnavailable:
        """The error for a connection or protocol failure talking to ``url``."""
        detail = str(exc) or type(exc).__name__
        return SourceUnavailable(self.name, f"cannot read {what} {url}: {detail}")

    async def head(
        self, url: str, headers: dict[str, str], what: str
    ) -> tuple[int, CIMultiDictProxy[str], list[Link]]:
        """``HEAD url`` without following redirects: status, headers, parsed Link header.

        Falls back to a ``GET`` (body left unread) when HEAD is refused with
        405 or 501. Raises SourceUnavailable (unreachable) or SourceBadAnswer
        (unparseable Link header); HTTP statuses are the caller's to judge.
        """
        target = self.request_url(url, what, from_client=what == "TimeGate")
        try:
            for method in ("HEAD", "GET"):
                async with self.clients.session.request(
                    method, target, headers=headers, allow_redirects=False
                ) as response:
                    if method == "HEAD" and response.status in (405, 501):
                        continue
                    answer = response.headers
                    status = response.status
                    break
        except aiohttp.ClientError as exc:
            raise self.unreachable(what, url, exc) from exc
        value = ", ".join(answer.getall("Link", []))
        try:
            links = parse_link_header(value)
        except ValueError as exc:
            raise SourceBadAnswer(self.name, f"{what} {url}: {exc}") from exc
        return status, answer, links

    def request_url(self, url: str, what: str, *, from_client: bool = False) -> URL:
        """``url`` for aiohttp: sent as written when it is plain ASCII (no ``..``
        collapsing in an embedded URL), requoted by yarl otherwise.

        Raises :class:`SourceUnavailable` when it is not a URL that can be
        requested, :class:`SourceRefused` instead with ``from_client`` (the URL
        was made from the client's: a TimeGate or the first TimeMap page).
        """
        problem = ""
        try:
            if url.isascii() and url.isprintable() and " " not in url:
                target = URL(url, encoded=True)
            else:
                target = URL(url)
        except ValueError as exc:
            problem = str(exc) or type(exc).__name__
        else:
            if target.scheme not in ("http", "https") or not target.host:
                problem = "not http(s)"
        if not problem:
            return target
        reason = f"cannot request {what} {url[:300]!r}: {problem}"
        if from_client:
            raise SourceRefused(self.name, f"not asked: {reason}")
        raise SourceUnavailable(self.name, reason)

    def timegate_url(self, url: str) -> str:
        """The TimeGate URL for ``url`` (the ``timegate_url`` template filled)."""
        return fill_template(self.config.timegate_url, url)

    # ------------------------------------------------------------------ records
    def _records(
        self, original: str, mementos: list[Memento], query: CaptureQuery
    ) -> list[CdxRecord]:
        try:
            urlkey = canonical_urlkey(original)
        except ValueError as exc:
            raise SourceBadAnswer(self.name, f"original URL {original!r}: {exc}") from exc
        if not query.key <= urlkey < query.end_key:
            if mementos:
                logger.info(
                    "memento source %s: %d mementos of %s dropped: its urlkey %s is "
                    "outside the query's range for %s",
                    self.name,
                    len(mementos),
                    original,
                    urlkey,
                    query.url,
                )
            return []
        seen: set[str] = set()
        records: list[CdxRecord] = []
        embedded_keys: dict[str, str | None] = {original: urlkey}
        for memento in mementos:
            if memento.uri in seen:
                continue
            seen.add(memento.uri)
            url = _captured_url(memento.uri, original, urlkey, embedded_keys)
            if _ID_MEMENTO.search(memento.uri):
                load_url = memento.uri
            else:
                load_url = fill_template(self.config.replay_url, url, memento.timestamp)
            records.append(CdxRecord(urlkey, memento.timestamp, {"url": url, "load_url": load_url}))
        records.sort(key=lambda r: (r.urlkey, r.timestamp, r.url))
        return records


def _timegate_suits(query: CaptureQuery) -> bool:
    """True when the TimeGate can answer ``query`` exactly (module docstring)."""
    return (
        query.closest is not None
        and 0 < query.limit <= TIMEGATE_MAX_LIMIT
        and query.match_type == "exact"
        and not query.filters
        and query.from_ts is None
        and query.to_ts is None
    )


def _is_page_link(link: Link, query: CaptureQuery) -> bool:
    """A link to another TimeMap page that may hold captures in the query's time range."""
    if link.has_rel("self"):
        return False
    if link.has_rel("next"):
        return True
    since, until = link.params.get("from"), link.params.get("until")
    if not link.has_rel("timemap") or (since is None and until is None):
        return False
    try:
        if until and query.from_ts and http_date_to_timestamp(until) < query.from_ts:
            return False
        if since and query.to_ts and http_date_to_timestamp(since) > query.to_ts:
            return False
    except ValueError:
        return True
    return True


def _captured_url(memento_uri: str, original: str, urlkey: str, keys: dict[str, str | None]) -> str:
    """The URL embedded in a wayback-style memento URI when it has ``urlkey``, else ``original``.

    ``keys`` caches urlkeys of embedded URLs (None: not canonicalizable).

    >>> _captured_url("http://arc/web/20140127171238mp_/http://iana.org", "http://www.iana.org/",
    ...               "org,iana)/", {})
    'http://iana.org'
    >>> _captured_url("http://arc/web/20140127171238/http://other.org/", "http://www.iana.org/",
    ...               "org,iana)/", {})
    'http://www.iana.org/'
    """
    match = _WAYBACK_PATH.search(memento_uri)
    if match is None:
        return original
    embedded = match.group(1)
    if embedded not in keys:
        try:
            keys[embedded] = canonical_urlkey(embedded)
        except ValueError:
            keys[embedded] = None
    return embedded if keys[embedded] == urlkey else original
