"""Memento endpoints (RFC 7089) for every collection: TimeGate, TimeMaps, raw mementos.

Routes (``{url}`` is the original URL, URI-R, taken from the raw request
path with its own query string, so ``/pywb/timegate/http://a/?q=1`` asks
about ``http://a/?q=1``; ``http:/a`` is repaired to ``http://a`` and a URL
without a scheme gets ``http://``):

``GET|HEAD /{coll}/timegate/{url}`` (and the wayback-style alias ``/{coll}/{url}``
for ``http(s)://`` URLs, which pywb's ``memento+`` sources call)
    A redirecting TimeGate (RFC 7089 §4.2.1, pattern 2.1): ``302`` to the
    URI-M closest to ``Accept-Datetime`` (the latest without one; the first
    or last when the datetime lies outside the TimeMap; equal distances go
    to the earlier memento), ``Vary: accept-datetime``, and a ``Link`` with
    exactly one ``original``, the ``timegate``, the TimeMaps (link format
    typed, with ``from``/``until``; JSON) and the first, last, previous,
    next and chosen mementos (relation types combined per URI-M,
    ``rel="first prev memento"``). A malformed ``Accept-Datetime`` is a 400
    naming the header (RFC 7089 §4.5.3); no mementos is a 404 whose ``Link``
    still names the original, TimeGate and TimeMap.
``GET /{coll}/timemap/{link|json|cdxj}/[{from}/]{url}``
    TimeMaps (RFC 7089 §5) as ``application/link-format``, mementoweb JSON
    or CDXJ (one line per capture, with ``source``). Captures in the same
    second (several sources, or several records) are one memento. Past
    ``page_size`` mementos (:data:`DEFAULT_TIMEMAP_PAGE_SIZE`, or the app's
    :data:`~gateway.api.keys.TIMEMAP_PAGE_SIZE`) the TimeMap is paged: a page
    holds ``page_size`` mementos starting at the 14-digit ``{from}``
    segment, and links to its neighbours as ``prev timemap`` / ``next
    timemap`` with ``from``/``until``. ``X-Memento-Count`` is the number of
    mementos of the whole TimeMap. Never varies on ``Accept-Datetime``.
``GET|HEAD /{coll}/{timestamp}id_/{url}``
    The archived HTTP response as captured (revisits resolved), with
    ``Memento-Datetime`` and the navigation ``Link``; a timestamp that is not
    exactly a capture's (1 to 14 digits) redirects (302) to the closest
    capture that loads. See :func:`gateway.api.replay.replay_headers` for what happens to the
    archived headers.

URI-Ms are ``{base}/{coll}/{timestamp}id_/{url}``, absolute: ``{base}`` is
the configured ``memento.public_url``, else ``{scheme}://{host}`` with the
request's ``Host`` validated and normalised (:mod:`gateway.api.host`; an
invalid ``Host`` is a 400 naming it). ``{url}`` is validated and normalised
once, before any lookup (:mod:`gateway.cdx.hosts`: its host in IDNA ASCII;
a host that is not valid is a 400 naming ``url``, on every collection): the
links, the lookups and a live fetch all use that form. A sequence
collection answers TimeGates and TimeMaps from its first step with captures
(as the Index API does).
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from aiohttp import web

from gateway.api.common import ERRORS_HEADER, client_left, collection_for, errors_header_value
from gateway.api.cors import add_cors_headers
from gateway.api.host import public_base
from gateway.api.keys import TIMEMAP_PAGE_SIZE
from gateway.api.replay import archived_response, replay_headers, unframe
from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.cdxops import timestamp_to_seconds
from gateway.cdx.hosts import normalize_url
from gateway.cdx.memento import (
    LINK_FORMAT,
    MementoRef,
    TimeMapPage,
    http_date_to_timestamp,
    link_uri,
    link_value,
    memento_links,
    timemap_json,
    timemap_link_format,
    timemap_link_value,
    timestamp_to_http_date,
)
from gateway.cdx.query import TIMESTAMP_DIGITS, CaptureQuery, closest_timestamp, pad_timestamp
from gateway.config import MementoSettings
from gateway.errors import BadRequest, GatewayError, NotFound
from gateway.index.collection import Collection, ServedStats, find_record
from gateway.index.group import Lookup
from gateway.loaders.base import LoadedRecord

__all__ = [
    "DEFAULT_TIMEMAP_PAGE_SIZE",
    "TIMEMAP_TYPES",
    "memento_handler",
    "timegate_handler",
    "timemap_handler",
    "uri_r_from_path",
    "wayback_timegate_handler",
]

logger = logging.getLogger(__name__)

#: Mementos per TimeMap page unless the app sets :data:`~gateway.api.keys.TIMEMAP_PAGE_SIZE`.
DEFAULT_TIMEMAP_PAGE_SIZE: Final = MementoSettings().timemap_page_size
#: TimeMap formats (the ``/timemap/{format}/`` segment) and their media types.
TIMEMAP_TYPES: Final[dict[str, str]] = {
    "link": LINK_FORMAT,
    "json": "application/json",
    "cdxj": "text/x-cdxj",
}
_JSON_KEYS: Final = {"link": "link_format", "json": "json_format", "cdxj": "cdxj_format"}
_PAGE_SEGMENT = re.compile(r"([0-9]{14})/(.+)", re.DOTALL)
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):/+")
_NO_BODY_STATUSES: Final = frozenset({204, 304})


# ---------------------------------------------------------------- the original URL and its URIs
@dataclass(frozen=True, slots=True)
class _Target:
    """The URI-R of a request and the gateway URIs built from it."""

    base: str  # "{public base}/coll" (gateway.api.host), the collection as in the request
    original: str

    def memento(self, ts: str) -> str:
        return f"{self.base}/{ts}id_/{self.original}"

    def timegate(self) -> str:
        return f"{self.base}/timegate/{self.original}"

    def timemap(self, fmt: str, from_ts: str | None = None) -> str:
        page = f"{from_ts}/" if from_ts else ""
        return f"{self.base}/timemap/{fmt}/{page}{self.original}"

    def links(self, first: str | None = None, last: str | None = None) -> list[str]:
        """``original``, ``timegate`` and the typed TimeMaps (RFC 7089 §2.2)."""
        timemap = link_value(link_uri(self.timemap("link")), "timemap", type=LINK_FORMAT)
        if first and last:
            timemap = timemap_link_value(TimeMapPage(self.timemap("link"), first, last), "timemap")
        return [
            link_value(link_uri(self.original), "original"),
            link_value(link_uri(self.timegate()), "timegate"),
            timemap,
            link_value(link_uri(self.timemap("json")), "timemap", type=TIMEMAP_TYPES["json"]),
        ]


def uri_r_from_path(text: str) -> str:
    """The URI-R of a path: ``http:/a`` -> ``http://a``; no scheme -> ``http://``
    prepended (as pywb does); then validated and normalised once
    (:func:`~gateway.cdx.hosts.normalize_url`: the host in IDNA ASCII,
    percent-escapes of the host decoded, ``http://%5B::1%5D/`` read as
    ``http://[::1]/``, since clients encode ``[`` and ``]``, which may not
    stand in a path). Raises :class:`BadRequest` naming ``url``.

    >>> uri_r_from_path("http:/example.com/a")
    'http://example.com/a'
    >>> uri_r_from_path("http://%5B::1%5D:8080/%5B")
    'http://[::1]:8080/%5B'
    >>> uri_r_from_path("http://B%C3%BCcher.example/")
    'http://xn--bcher-kva.example/'
    """
    match = _SCHEME.match(text)
    if match:
        scheme, rest = match.group(1), text[match.end() :]
    else:
        scheme, rest = "http", text
    try:
        return normalize_url(f"{scheme}://{rest}")
    except ValueError as exc:
        raise BadRequest("url", str(exc)) from exc


def _target(request: web.Request, skip: int, *, paged: bool = False) -> tuple[_Target, str | None]:
    """The URI-R after ``skip`` path segments of the raw path (query string
    included) and, when ``paged``, the 14-digit TimeMap page segment before it.

    Raises :class:`BadRequest` (``url``) when there is no URL.
    """
    parts = request.raw_path.split("/", skip + 1)
    rest = parts[skip + 1] if len(parts) > skip + 1 else ""
    from_ts = None
    page = _PAGE_SEGMENT.fullmatch(rest) if paged else None
    if page is not None:
        from_ts, rest = page.group(1), page.group(2)
    if not rest.split("?", 1)[0]:
        raise BadRequest(
            "url",
            "missing; put the original URL after the route, e.g. "
            f"/{parts[1]}/timegate/http://example.com/",
        )
    base = f"{public_base(request)}/{parts[1]}"
    return _Target(base, uri_r_from_path(rest)), from_ts


def _query(url: str, closest: str | None = None) -> CaptureQuery:
    """The lookup of a URI-R :func:`_target` normalised already (not checked again)."""
    try:
        return CaptureQuery.for_url(url, closest=closest, check=False)
    except ValueError as exc:
        raise BadRequest("url", str(exc)) from exc


def _not_found(message: str, errors: dict[str, str], links: Sequence[str]) -> web.Response:
    """404 JSON (``{"message", "errors"}``) that still carries the Memento links."""
    headers = {"Link": ", ".join(links)}
    if errors:
        headers[ERRORS_HEADER] = errors_header_value(errors)
    return web.json_response(NotFound(message, errors).to_json(), status=404, headers=headers)


# ---------------------------------------------------------------- scanning an index
def _memento_timestamp(record: CdxRecord) -> str | None:
    """The capture's 14-digit timestamp, or None (logged) when it is not a date."""
    ts = pad_timestamp(record.timestamp, up=False)
    try:
        datetime(
            int(ts[:4]), int(ts[4:6]), int(ts[6:8]), int(ts[8:10]), int(ts[10:12]), int(ts[12:])
        )
    except ValueError:
        logger.warning("skipping capture with invalid timestamp %r: %s", ts, record.url)
        return None
    return ts


async def _grouped(answer: Lookup) -> AsyncIterator[tuple[str, list[CdxRecord]]]:
    """Captures of an ascending answer grouped by timestamp: one memento per second."""
    current: str | None = None
    group: list[CdxRecord] = []
    async for record in answer:
        ts = _memento_timestamp(record)
        if ts is None:
            continue
        if ts != current and group:
            assert current is not None
            yield current, group
            group = []
        current = ts
        group.append(record)
    if group and current is not None:
        yield current, group


@dataclass(slots=True)
class _Neighbours:
    """The chosen memento of a datetime negotiation and its neighbours (timestamps)."""

    errors: dict[str, str]
    count: int = 0
    first: str | None = None
    last: str | None = None
    selected: str | None = None
    prev: str | None = None
    next: str | None = None

    def links(self, target: _Target) -> list[str]:
        def ref(ts: str | None) -> MementoRef | None:
            return MementoRef(ts, target.memento(ts)) if ts else None

        navigation = {
            "first": ref(self.first),
            "last": ref(self.last),
            "prev": ref(self.prev),
            "next": ref(self.next),
        }
        return [
            *target.links(self.first, self.last),
            *memento_links(navigation, selected=ref(self.selected)),
        ]


async def _negotiate(collection: Collection, target: _Target, wanted: str | None) -> _Neighbours:
    """One ascending pass over the URI-R's captures: the memento closest to
    ``wanted`` (the latest when None), its previous and next mementos, the
    first and the last. Equal distances choose the earlier memento."""
    _step, answer = await collection.lookup(_query(target.original))
    found = _Neighbours(errors=answer.errors)
    # a, b: the last two mementos <= wanted; c, d: the first two after it.
    a = b = c = d = None
    async for ts, _group in _grouped(answer):
        found.count += 1
        found.first = found.first or ts
        found.last = ts
        if wanted is None or ts <= wanted:
            a, b = b, ts
        elif c is None:
            c = ts
        elif d is None:
            d = ts
    if found.count == 0:
        return found
    if b is not None and (c is None or wanted is None or _closer_or_equal(wanted, b, c)):
        found.selected, found.prev, found.next = b, a, c
    else:
        found.selected, found.prev, found.next = c, b, d
    return found


def _closer_or_equal(wanted: str, before: str, after: str) -> bool:
    target = timestamp_to_seconds(wanted)
    return target - timestamp_to_seconds(before) <= timestamp_to_seconds(after) - target


# ---------------------------------------------------------------- TimeGate
def _accept_datetime(request: web.Request) -> str | None:
    value = request.headers.get("Accept-Datetime")
    if value is None:
        return None
    try:
        return http_date_to_timestamp(value)
    except ValueError:
        raise BadRequest(
            "Accept-Datetime",
            f"{value!r} is not an HTTP date; expected RFC 7231 IMF-fixdate as "
            "RFC 7089 §2.1.1 requires, e.g. 'Sun, 26 Jan 2014 20:06:24 GMT'",
        ) from None


async def _timegate(request: web.Request, target: _Target) -> web.Response:
    collection = collection_for(request)
    wanted = _accept_datetime(request)
    found = await _negotiate(collection, target, wanted)
    if found.selected is None:
        response = _not_found(
            f"no mementos of {target.original} in collection {collection.name!r}",
            found.errors,
            target.links(),
        )
        response.headers["Vary"] = "accept-datetime"
        return response
    headers = {
        "Vary": "accept-datetime",
        "Location": target.memento(found.selected),
        "Link": ", ".join(found.links(target)),
    }
    if found.errors:
        headers[ERRORS_HEADER] = errors_header_value(found.errors)
    return web.Response(status=302, headers=headers)


async def timegate_handler(request: web.Request) -> web.Response:
    """``GET|HEAD /{coll}/timegate/{url}``: 302 to the best memento (module docstring)."""
    return await _timegate(request, _target(request, skip=2)[0])


async def wayback_timegate_handler(request: web.Request) -> web.Response:
    """``GET|HEAD /{coll}/{url}`` for ``http(s)://`` URLs: the same TimeGate,
    where pywb's ``memento+http://host/{coll}/`` sources look for it."""
    return await _timegate(request, _target(request, skip=1)[0])


# ---------------------------------------------------------------- TimeMaps
@dataclass(slots=True)
class _Page:
    """One TimeMap page: its mementos (and captures), the whole map's extent."""

    errors: dict[str, str]
    count: int = 0
    first: str | None = None
    last: str | None = None
    timestamps: list[str] = field(default_factory=list)
    records: list[CdxRecord] = field(default_factory=list)
    prev: tuple[str, str] | None = None
    next: tuple[str, str] | None = None


async def _scan_page(
    collection: Collection, target: _Target, from_ts: str | None, size: int, keep: bool
) -> _Page:
    """One ascending pass: count everything, keep the ``size`` mementos from
    ``from_ts`` on (and their captures when ``keep``), and note the extent of
    the ``size`` mementos before and after them."""
    _step, answer = await collection.lookup(_query(target.original))
    page = _Page(errors=answer.errors)
    before: deque[str] = deque(maxlen=size)
    index = 0
    next_from = next_until = None
    async for ts, group in _grouped(answer):
        page.count += 1
        page.first = page.first or ts
        page.last = ts
        if from_ts is not None and ts < from_ts:
            before.append(ts)
            continue
        if index < size:
            page.timestamps.append(ts)
            if keep:
                page.records.extend(group)
        elif index < 2 * size:
            next_from = next_from or ts
            next_until = ts
        index += 1
    if before:
        page.prev = (before[0], before[-1])
    if next_from and next_until:
        page.next = (next_from, next_until)
    return page


def _unless(ts: str, first: str) -> str | None:
    return None if ts == first else ts


async def timemap_handler(request: web.Request) -> web.Response:
    """``GET /{coll}/timemap/{format}/[{from}/]{url}``: a TimeMap (page); see the module docstring.

    400 for an unknown format or URL; 404 (with Link) when there is no memento
    (from ``from`` on); 503 when every source failed.
    """
    collection = collection_for(request)
    fmt = request.match_info["format"]
    if fmt not in TIMEMAP_TYPES:
        raise BadRequest("format", f"{fmt!r} is not one of {', '.join(TIMEMAP_TYPES)}")
    target, from_ts = _target(request, skip=3, paged=True)
    size = request.app.get(TIMEMAP_PAGE_SIZE, DEFAULT_TIMEMAP_PAGE_SIZE)
    page = await _scan_page(collection, target, from_ts, size, keep=fmt == "cdxj")
    if not page.timestamps or page.first is None or page.last is None:
        where = f" from {from_ts} on" if from_ts and page.count else ""
        return _not_found(
            f"no mementos of {target.original}{where} in collection {collection.name!r}",
            page.errors,
            target.links(page.first, page.last),
        )
    media_type = TIMEMAP_TYPES[fmt]
    this = TimeMapPage(target.timemap(fmt, from_ts), page.timestamps[0], page.timestamps[-1])
    # The page starting at the first memento is the TimeMap's own URI.
    others = {
        rel: TimeMapPage(target.timemap(fmt, _unless(extent[0], page.first)), *extent)
        for rel, extent in (("prev", page.prev), ("next", page.next))
        if extent is not None
    }
    links = [
        link_value(link_uri(target.original), "original"),
        timemap_link_value(this, "self", media_type),
        link_value(link_uri(target.timegate()), "timegate"),
        *(timemap_link_value(other, f"{rel} timemap", media_type) for rel, other in others.items()),
    ]
    headers = {"Link": ", ".join(links), "X-Memento-Count": str(page.count)}
    if page.errors:
        headers[ERRORS_HEADER] = errors_header_value(page.errors)
    mementos = [MementoRef(ts, target.memento(ts)) for ts in page.timestamps]
    if fmt == "json":
        body = timemap_json(
            original=target.original,
            timegate=target.timegate(),
            timemaps={_JSON_KEYS[name]: target.timemap(name, from_ts) for name in TIMEMAP_TYPES},
            mementos=mementos,
            first=MementoRef(page.first, target.memento(page.first)),
            last=MementoRef(page.last, target.memento(page.last)),
            pages=others,
        )
        return web.json_response(body, headers=headers)
    if fmt == "link":
        text = timemap_link_format(
            original=target.original,
            timegate=target.timegate(),
            page=this,
            mementos=mementos,
            first_ts=page.first,
            last_ts=page.last,
            pages=others,
        )
    else:
        text = "".join(record.to_cdxj() for record in page.records)
    headers["Content-Type"] = media_type
    return web.Response(body=text.encode("utf-8"), headers=headers)


# ---------------------------------------------------------------- raw mementos
async def _send_memento(
    request: web.Request,
    target: _Target,
    loaded: LoadedRecord,
    found: _Neighbours,
    errors: dict[str, str],
    served: ServedStats,
) -> web.StreamResponse:
    status, reason, archived = archived_response(loaded)
    assert found.selected is not None
    response = web.StreamResponse(status=status, reason=reason or None)
    chunked = False
    for name, value in archived:
        chunked = chunked or (name.lower() == "transfer-encoding" and "chunked" in value.lower())
    for name, value in replay_headers(
        archived, memento_base=f"{target.base}/{found.selected}id_/", target_uri=loaded.target_uri
    ):
        response.headers.add(name, value)
    response.headers["Memento-Datetime"] = timestamp_to_http_date(found.selected)
    response.headers["Link"] = ", ".join(found.links(target))
    if errors:
        response.headers[ERRORS_HEADER] = errors_header_value(errors)
    has_body = status not in _NO_BODY_STATUSES
    body = loaded.body
    if chunked:
        body, chunked = await unframe(body)
    if has_body and not chunked and loaded.content_length is not None:
        size = loaded.content_length - len(loaded.warc_headers) - len(loaded.http_headers)
        response.content_length = max(size, 0)
    await add_cors_headers(response).prepare(request)
    sent = 0
    try:
        if has_body and request.method != "HEAD":
            async for chunk in body:
                await response.write(chunk)
                sent += len(chunk)
        await response.write_eof()
    except ConnectionError:
        client_left(request)
        return response
    except GatewayError as exc:  # a load error, or a recording not stored (durable_ack)
        # The status line is out: close the connection, so the body is seen short.
        logger.error(
            "%s %s: failed after the answer started: %s", request.method, request.path_qs, exc
        )
        if request.transport is not None:
            request.transport.close()
        return response
    if request.method != "HEAD":
        served.served(sent)
    return response


async def memento_handler(request: web.Request) -> web.StreamResponse:
    """``GET|HEAD /{coll}/{timestamp}id_/{url}``: the archived response (module docstring).

    302 to the exact URI-M when ``timestamp`` is not the served capture's;
    404 (with Link) when no capture loads; 503 when every source failed.
    """
    collection = collection_for(request)
    target, _ = _target(request, skip=2)
    requested = request.match_info["timestamp"]
    if not TIMESTAMP_DIGITS.fullmatch(requested):  # the route's \d takes any script's digits
        raise BadRequest("timestamp", f"{requested!r} is not 1 to 14 ASCII digits")
    query = _query(target.original, closest=closest_timestamp(requested))
    try:
        step, loaded, errors = await find_record(collection, query)
    except NotFound as exc:
        return _not_found(exc.message, exc.errors, target.links())
    try:
        captured = pad_timestamp(loaded.capture.timestamp, up=False)
        if captured != requested:
            return web.Response(
                status=302,
                headers={"Location": target.memento(captured), "Link": ", ".join(target.links())},
            )
        found = await _negotiate(collection, target, captured)
        if found.selected != captured:
            # Served from a later step of a sequence (the first step's captures
            # did not load), or the index changed in between: no neighbours known.
            found.selected, found.prev, found.next = captured, None, None
        return await _send_memento(request, target, loaded, found, errors, step.served)
    finally:
        await loaded.aclose()
