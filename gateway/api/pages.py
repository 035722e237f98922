"""Pages for people: the collections at ``GET /`` and a calendar of captures per URL.

Server-rendered with Jinja2 (autoescaped templates in ``gateway/templates``),
no JavaScript, no build step. ``GET /`` answers this page to clients that
ask for ``text/html`` (browsers) and the JSON description to everyone else
(:func:`gateway.api.status.root_handler`).

``GET /{coll}/`` is a collection's page, pywb's collection search page
(``/{coll}/``) and query page (``/{coll}/*/{url}``) in one:

- without ``url``: the search form, and the pages its WACZ members list in
  their ``pages/pages.jsonl`` (title, URL, time, as ReplayWeb.page lists
  them; the first :data:`MAX_LISTED_PAGES`), each title linking to the raw
  memento of the page at its time, each URL to its calendar;
- ``?url=U``: the captures of ``U`` (an exact lookup, fuzzy matching as in
  the Index API) as a calendar in the manner of the Wayback Machine: the
  years with their counts, the twelve months of the selected ``year``
  (default: the last year with captures) with a count on each day that has
  captures, and the captures of the selected ``day`` (``YYYYMMDD``; default:
  the last day with captures), each linking to its replay in the browser
  (``/{coll}/{timestamp}/{url}``, when replay is on: :mod:`gateway.api.client_replay`),
  its raw memento (``/{coll}/{timestamp}id_/{url}``), its WARC record (the
  Resource API) and its index line; the URL's TimeMaps are linked too;
- ``?url=U*`` (a prefix) or ``?url=*.host``: the URLs captured under it, each
  linking to its calendar.

Bad input (an unparseable URL, a malformed ``year`` or ``day``) is a 400
page saying what was wrong; an unknown collection a 404 page; a collection
whose sources all failed a 503 page naming each failure.

The pages are for every visitor: the server's filesystem paths (an index
file's or directory's, the store's root, a path in a failure's reason) are
shown as ``…`` unless the operator asks for them (the app key
:data:`~gateway.api.keys.SHOW_PATHS`: ``GATEWAY_SHOW_PATHS=1`` in the
environment of ``gateway serve``). URLs are shown as they are.
"""

from __future__ import annotations

import asyncio
import calendar
import functools
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final
from urllib.parse import quote, urlencode

from aiohttp import web

from gateway.access.policy import ACCESS_FIELD, MESSAGE_FIELD
from gateway.api.common import collection_for
from gateway.api.keys import CLIENTS, COLLECTIONS, CONFIG, SHOW_PATHS
from gateway.cdx.query import parse_query
from gateway.errors import BadRequest, GatewayError
from gateway.sources.base import PageList

if TYPE_CHECKING:
    import jinja2

    from gateway.cdx.cdxj import CdxRecord
    from gateway.index.collection import Collection

__all__ = [
    "MAX_PAGE_CAPTURES",
    "collection_page",
    "error_page",
    "hide_paths",
    "home_page",
    "render_page",
    "wants_html",
]

#: At most this many captures of one URL (or URLs under a prefix) are read for a page.
MAX_PAGE_CAPTURES: Final = 10_000
#: At most this many entries of the collection's page lists (WACZ pages.jsonl) are shown.
MAX_LISTED_PAGES: Final = 1_000
_YEAR = re.compile(r"\d{4}")
_DAY = re.compile(r"\d{8}")
_MONTHS: Final = tuple(calendar.month_name[1:])
#: An absolute filesystem path: a ``/`` that does not continue a word, a URL
#: (``http://h/x``: after ``:``, ``/`` or the host) or a relative path, up to
#: the next space, quote, bracket or separator.
_FS_PATH = re.compile(r"(?<![\w/:.~$-])/[^\s'\"()<>\[\],;]+")
_HIDDEN: Final = "…"


def hide_paths(text: str) -> str:
    """``text`` with its absolute filesystem paths shown as ``…``.

    >>> hide_paths("directory /srv/archive/indexes (1 index file)")
    'directory … (1 index file)'
    >>> hide_paths("cannot read '/srv/a.cdxj': denied; see http://h/x/y")
    "cannot read '…': denied; see http://h/x/y"
    """
    return _FS_PATH.sub(_HIDDEN, text)


def wants_html(request: web.Request) -> bool:
    """True when the client prefers HTML (a browser's ``Accept``), not JSON or anything."""
    accept = request.headers.get("Accept", "")
    return "text/html" in accept and "application/json" not in accept


@functools.cache
def _templates() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gateway", "templates"),
        autoescape=jinja2.select_autoescape(("html",)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda text: quote(str(text), safe="")
    env.globals["page_link"] = page_link
    env.globals["max_captures"] = MAX_PAGE_CAPTURES
    return env


def render_page(name: str, status: int = 200, /, **context: object) -> web.Response:
    """The template ``name`` of ``gateway/templates`` (autoescaped) as an HTML answer."""
    text = _templates().get_template(name).render(**context)
    return web.Response(text=text, status=status, content_type="text/html", charset="utf-8")


@dataclass(frozen=True, slots=True)
class _Source:
    name: str
    description: str
    state: str
    detail: str


@dataclass(frozen=True, slots=True)
class _PageError:
    """A :class:`GatewayError` as a page shows it (paths hidden unless asked for)."""

    status: int
    message: str
    errors: dict[str, str]


def _shows_paths(request: web.Request) -> bool:
    return request.app.get(SHOW_PATHS, False)


def error_page(request: web.Request, exc: GatewayError, title: str) -> web.Response:
    """``exc`` as the page ``templates/error.html`` with its status (paths hidden unless asked)."""
    return render_page(
        "error.html", exc.status, title=title, error=_page_error(exc, _shows_paths(request))
    )


def _page_error(exc: GatewayError, show_paths: bool) -> _PageError:
    if show_paths:
        return _PageError(exc.status, exc.message, exc.errors)
    errors = {hide_paths(name): hide_paths(reason) for name, reason in exc.errors.items()}
    return _PageError(exc.status, hide_paths(exc.message), errors)


def _sources(collection: Collection, show_paths: bool) -> list[tuple[str, list[_Source]]]:
    """Each step's sources with their circuit-breaker state, in config order
    (filesystem paths hidden unless ``show_paths``)."""
    shown = (lambda text: text) if show_paths else hide_paths
    steps = []
    for step in collection.steps:
        described = dict(step.index.describe_members())
        sources = []
        for name, breaker in step.index.breakers.items():
            state = breaker.state()
            if state["state"] == "open":
                detail = f"skipped for {state['retry_in_s']} s more: {state['last_failure']}"
            elif breaker.failures:
                detail = f"{breaker.failures} failure(s) in a row: {breaker.last_reason}"
            else:
                detail = ""
            status = "down" if state["state"] == "open" else "failing" if detail else "ok"
            description = shown(described.get(name, ""))
            sources.append(_Source(name, description, status, shown(detail)))
        steps.append((step.name, sources))
    return steps


async def home_page(request: web.Request) -> web.Response:
    """``GET /`` for browsers: every collection, its sources' health and a search form,
    and, with a store, its safety in one line (:mod:`gateway.store.integrity.safety`:
    the report ``/_status`` and ``store copies`` give)."""
    show_paths = _shows_paths(request)
    collections = [
        (name, collection.is_sequence, _sources(collection, show_paths))
        for name, collection in request.app[COLLECTIONS].items()
    ]
    cached = request.app[CLIENTS].store_safety
    safety = await asyncio.to_thread(cached.get) if cached is not None else None
    return render_page(
        "home.html",
        collections=collections,
        store_safe=None if safety is None else safety.all_safe,
        store_line=None if safety is None else safety.summary_line(),
    )


@dataclass(frozen=True, slots=True)
class _Capture:
    urlkey: str
    timestamp: str
    url: str
    status: str
    mime: str
    source: str
    fuzzy: bool
    #: Set for a capture an access rule blocks: the rule's message, or a generic one.
    blocked: str | None = None

    @property
    def when(self) -> str:
        """``2014-01-26 20:06:24`` (UTC)."""
        t = self.timestamp.ljust(14, "0")
        return f"{t[:4]}-{t[4:6]}-{t[6:8]} {t[8:10]}:{t[10:12]}:{t[12:14]}"


@dataclass(frozen=True, slots=True)
class _Month:
    number: int
    name: str
    weeks: list[list[tuple[int, int]]]  # (day of month or 0, captures that day)
    count: int


async def collection_page(request: web.Request) -> web.Response:
    """``GET /{coll}/[?url=U[&year=YYYY][&day=YYYYMMDD]]``: see the module docstring."""
    name = request.match_info["coll"]
    show_paths = _shows_paths(request)
    try:
        collection = collection_for(request)
    except GatewayError as exc:
        if not wants_html(request):
            raise  # API clients get the JSON error every route gives
        return error_page(request, exc, "Unknown collection")
    url = request.query.get("url", "").strip()
    sources = _sources(collection, show_paths)
    replay = request.app[CONFIG].replay.enabled
    context: dict[str, object] = {"coll": name, "url": url, "sources": sources, "replay": replay}
    if not url:
        pages, total = await _page_list(collection)
        return render_page("collection.html", **context, pages=pages, pages_total=total)
    try:
        captures = await _captures(collection, url)
        if "*" in url:
            truncated = len(captures) >= MAX_PAGE_CAPTURES
            return render_page(
                "collection.html", **context, urls=_url_counts(captures), truncated=truncated
            )
        context.update(_calendar(captures, request.query))
    except GatewayError as exc:
        if not wants_html(request):
            raise
        context["error"] = _page_error(exc, show_paths)
        return render_page("collection.html", exc.status, **context)
    return render_page("collection.html", **context)


async def _page_list(collection: Collection) -> tuple[list[_ListedPage], int]:
    """Up to :data:`MAX_LISTED_PAGES` pages of the members that carry a list of pages
    (WACZ ``pages/pages.jsonl``), in step and member order, and how many there are.

    Each member gets its step's timeout (opening a WACZ verifies it first); one
    that does not answer in time is left out.
    """
    listed: list[_ListedPage] = []
    total = 0
    for step in collection.steps:
        for member in step.index.members:
            if not isinstance(member, PageList):
                continue
            try:
                async with asyncio.timeout(step.index.timeout_s):
                    pages, count = await member.pages(MAX_LISTED_PAGES - len(listed))
            except TimeoutError:
                continue
            total += count
            listed += [
                _ListedPage(p.url, p.title, p.timestamp, f"{member.name}:{p.origin}") for p in pages
            ]
    return listed, total


@dataclass(frozen=True, slots=True)
class _ListedPage:
    url: str
    title: str
    timestamp: str
    source: str

    @property
    def when(self) -> str:
        """``2014-01-26 20:06:24`` (UTC)."""
        t = self.timestamp.ljust(14, "0")
        return f"{t[:4]}-{t[4:6]}-{t[6:8]} {t[8:10]}:{t[10:12]}:{t[12:14]}"


async def _captures(collection: Collection, url: str) -> list[_Capture]:
    """Up to :data:`MAX_PAGE_CAPTURES` captures of ``url`` in (urlkey, timestamp) order.

    Raises :class:`BadRequest` for a URL the Index API would refuse, and
    :class:`~gateway.errors.AllSourcesFailed` when every source failed.
    """
    query = parse_query({"url": [url], "limit": [str(MAX_PAGE_CAPTURES)]})
    _step, answer = await collection.lookup(query)
    try:
        return [_capture(record) async for record in answer]
    finally:
        await answer.aclose()


def _capture(record: CdxRecord) -> _Capture:
    fields = record.fields
    blocked = None
    if fields.get(ACCESS_FIELD) == "block":
        blocked = fields.get(MESSAGE_FIELD) or "access to this capture is blocked"
    return _Capture(
        urlkey=record.urlkey,
        timestamp=record.timestamp,
        url=record.url,
        status=record.status or "-",
        mime=record.mime or "-",
        source=record.source,
        fuzzy=record.get("is_fuzzy") == "1",
        blocked=blocked,
    )


def _url_counts(captures: list[_Capture]) -> list[tuple[str, int, str, str]]:
    """``(url, captures, first day, last day)`` for each urlkey of a prefix or domain
    lookup, in urlkey order; ``url`` is its first capture's (``http://`` and
    ``https://`` captures of one URL share a urlkey, and one calendar)."""
    seen: dict[str, list[_Capture]] = {}
    for capture in captures:
        seen.setdefault(capture.urlkey, []).append(capture)
    return [
        (found[0].url, len(found), found[0].when[:10], found[-1].when[:10])
        for found in seen.values()
    ]


def _calendar(captures: list[_Capture], params: Mapping[str, str]) -> dict[str, object]:
    """Years, the selected year's months and the selected day's captures."""
    year_text, day_text = params.get("year", ""), params.get("day", "")
    if year_text and not _YEAR.fullmatch(year_text):
        raise BadRequest("year", f"{year_text!r} is not a year; expected 4 digits")
    if day_text and not _DAY.fullmatch(day_text):
        raise BadRequest("day", f"{day_text!r} is not a day; expected YYYYMMDD")
    if not captures:
        return {"captures": [], "years": []}
    years = sorted(Counter(c.timestamp[:4] for c in captures).items())
    if day_text:
        day = day_text
    elif year_text:
        day = _last_day(captures, year_text)  # "" for a year without captures
    else:
        day = captures[-1].timestamp[:8]
    year = year_text or day[:4]
    per_day = Counter(c.timestamp[:8] for c in captures if c.timestamp.startswith(year))
    months = []
    for number in range(1, 13):
        prefix = f"{year}{number:02d}"
        weeks = [
            [(d, per_day.get(f"{prefix}{d:02d}", 0) if d else 0) for d in week]
            for week in calendar.Calendar().monthdayscalendar(int(year), number)
        ]
        count = sum(n for key, n in per_day.items() if key.startswith(prefix))
        months.append(_Month(number, _MONTHS[number - 1], weeks, count))
    return {
        "captures": captures,
        "years": years,
        "year": year,
        "months": months,
        "day": day,
        "day_captures": [c for c in captures if day and c.timestamp.startswith(day)],
        "first": captures[0],
        "last": captures[-1],
        "fuzzy": any(c.fuzzy for c in captures),
        "truncated": len(captures) >= MAX_PAGE_CAPTURES,
    }


def _last_day(captures: list[_Capture], year: str) -> str:
    days = [c.timestamp[:8] for c in captures if c.timestamp.startswith(year)]
    return days[-1] if days else ""


def page_link(coll: str, **params: str) -> str:
    """``/{coll}/?...`` with ``params`` (empty ones left out)."""
    kept = {key: value for key, value in params.items() if value}
    return f"/{quote(coll, safe='')}/" + (f"?{urlencode(kept)}" if kept else "")
