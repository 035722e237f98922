"""The TimeGate half of the Memento source: the ``limit`` mementos closest to a time.

RFC 7089 §4 (a TimeGate answers ``Accept-Datetime`` with the memento it
selects: a 302 ``Location``, or a 200 with ``Content-Location``) and §2.2.4
(``first``/``last``/``prev``/``next`` ``memento`` links on TimeGate and
memento responses). :class:`TimeGateWalk` asks the TimeGate once and then
widens a window of consecutive mementos around the selected one, always on
the side whose next memento is closer to the requested time (ties go to the
earlier one, as :func:`gateway.cdx.cdxops.process` orders them), reading a
memento's own ``Link`` header (``HEAD``) only when its neighbour is needed.

The window is exact or nothing: when a needed neighbour cannot be known (the
archive's links do not chain, or a memento answers 4xx) :meth:`TimeGateWalk.run`
returns None and the caller reads the TimeMap instead.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Final, Protocol
from urllib.parse import urljoin

from multidict import CIMultiDictProxy

from gateway.cdx.cdxops import timestamp_to_seconds
from gateway.cdx.memento import Link, http_date_to_timestamp, timestamp_to_http_date
from gateway.errors import SourceBadAnswer

__all__ = ["Memento", "MementoHttp", "TimeGateWalk", "memento_from_link"]

logger = logging.getLogger(__name__)

#: Plain redirects (without Memento headers) followed before the TimeGate answers.
MAX_REDIRECTS: Final = 5
_NAVIGATION: Final = ("prev", "next", "first", "last")


@dataclass(frozen=True, slots=True)
class Memento:
    """One memento: its absolute URI and 14-digit timestamp."""

    uri: str
    timestamp: str


def memento_from_link(link: Link, base: str) -> Memento | None:
    """The memento of a ``rel="memento"`` link (URI resolved against ``base``).

    None when its ``datetime`` is missing or not an HTTP date.
    """
    try:
        timestamp = http_date_to_timestamp(link.params.get("datetime", ""))
    except ValueError:
        return None
    return Memento(urljoin(base, link.url), timestamp)


class MementoHttp(Protocol):
    """What the walk needs from the source: its name and two HTTP helpers."""

    name: str

    def timegate_url(self, url: str) -> str: ...

    async def head(
        self, url: str, headers: dict[str, str], what: str
    ) -> tuple[int, CIMultiDictProxy[str], list[Link]]: ...

    def raise_for_status(
        self,
        status: int,
        headers: CIMultiDictProxy[str],
        what: str,
        url: str,
        *,
        from_client: bool = False,
    ) -> None: ...


class _Unknown:
    """A neighbour that cannot be known from the archive's links."""


_UNKNOWN: Final = _Unknown()


class TimeGateWalk:
    """One TimeGate lookup of ``url`` around ``closest`` for up to ``limit`` mementos."""

    def __init__(self, http: MementoHttp, url: str, closest: str, limit: int) -> None:
        self.http = http
        self.url = url
        self.closest = closest
        self.limit = limit
        self.original = ""
        #: memento URI -> timestamp, for every memento seen with a datetime.
        self.known: dict[str, str] = {}
        #: memento URI -> the previous/next memento URI, None at either end.
        self.prev_of: dict[str, str | None] = {}
        self.next_of: dict[str, str | None] = {}
        self.fetched: set[str] = set()

    async def run(self) -> tuple[str, list[Memento]] | None:
        """``(original URL, mementos)``; ``(url, [])`` when the TimeGate says 404/410.

        None when the window cannot be completed from links (read the TimeMap).
        Raises SourceUnavailable (unreachable, 5xx, 401, 407, 408, 429),
        SourceRefused (another 4xx: about the client's URL) and SourceBadAnswer
        (no memento selected, bad Link header).
        """
        selected = await self._ask_timegate()
        if selected is None:
            return self.url, []
        window = [selected]
        members = {selected}
        low = high = selected
        while len(window) < self.limit:
            before = await self._neighbour(low, self.prev_of, members)
            after = await self._neighbour(high, self.next_of, members)
            if isinstance(before, _Unknown) or isinstance(after, _Unknown):
                logger.debug(
                    "memento source %s: links around %s do not chain; reading the TimeMap",
                    self.http.name,
                    low if isinstance(before, _Unknown) else high,
                )
                return None
            if before is None and after is None:
                break
            if after is None or (
                before is not None and self._distance(before) <= self._distance(after)
            ):
                assert before is not None
                low = before
                window.append(before)
                members.add(before)
            else:
                high = after
                window.append(after)
                members.add(after)
        mementos = [Memento(uri, self.known[uri]) for uri in window]
        return self.original or self.url, mementos

    def _distance(self, uri: str) -> int:
        return abs(timestamp_to_seconds(self.known[uri]) - timestamp_to_seconds(self.closest))

    async def _ask_timegate(self) -> str | None:
        """The URI of the memento the TimeGate selects (datetime known); None for 404/410."""
        url = self.http.timegate_url(self.url)
        headers = {"Accept-Datetime": timestamp_to_http_date(self.closest)}
        for _hop in range(MAX_REDIRECTS + 1):
            status, answer, links = await self.http.head(url, headers, "TimeGate")
            if status in (404, 410):
                return None
            # The TimeGate URL is made from the client's: a 4xx is about the query.
            self.http.raise_for_status(status, answer, "TimeGate", url, from_client=True)
            if 300 <= status < 400:
                location = answer.get("Location")
                if not location:
                    raise SourceBadAnswer(
                        self.http.name, f"TimeGate {url} answered {status} without Location"
                    )
                if _is_memento_answer(answer, links):
                    selected: str | None = urljoin(url, location)
                    break
                url = urljoin(url, location)  # a plain redirect to the real TimeGate
                continue
            if 200 <= status < 300:
                content_location = answer.get("Content-Location")
                if content_location:
                    selected = urljoin(url, content_location)
                elif "Memento-Datetime" in answer:
                    selected = url  # redirected straight to a memento (no Memento headers)
                else:
                    selected = None
                break
            raise SourceBadAnswer(self.http.name, f"TimeGate {url} answered HTTP {status}")
        else:
            raise SourceBadAnswer(
                self.http.name, f"TimeGate {url}: more than {MAX_REDIRECTS} redirects"
            )
        if selected is None:
            selected = self._selected_from_links(links, url)
        self._learn(selected, links, url)
        if selected not in self.known and 200 <= status < 300:
            self._learn_datetime(selected, answer)
        if selected not in self.known and selected not in self.fetched:
            await self._fetch(selected)
        if selected not in self.known:
            raise SourceBadAnswer(
                self.http.name,
                f"TimeGate {url} selected memento {selected} but neither its Link header "
                "nor the memento's Memento-Datetime gives its datetime",
            )
        return selected

    def _selected_from_links(self, links: list[Link], base: str) -> str:
        """A 200 TimeGate without Content-Location: its one plain ``rel="memento"`` link."""
        plain = [
            link
            for link in links
            if link.has_rel("memento") and not any(link.has_rel(r) for r in _NAVIGATION)
        ]
        if len(plain) != 1:
            raise SourceBadAnswer(
                self.http.name,
                f"TimeGate {base} answered without Location or Content-Location and with "
                f'{len(plain)} plain rel="memento" links; expected exactly one',
            )
        return urljoin(base, plain[0].url)

    async def _neighbour(
        self, uri: str, table: dict[str, str | None], members: set[str]
    ) -> str | _Unknown | None:
        """The memento before/after ``uri`` (per ``table``) with its datetime known."""
        if uri not in table and uri not in self.fetched:
            await self._fetch(uri)
        if uri not in table:
            return _UNKNOWN
        neighbour = table[uri]
        if neighbour is None:
            return None
        if neighbour in members:
            return _UNKNOWN  # links that loop back: do not trust them
        if neighbour not in self.known and neighbour not in self.fetched:
            await self._fetch(neighbour)
        return neighbour if neighbour in self.known else _UNKNOWN

    async def _fetch(self, uri: str) -> None:
        """``HEAD`` a memento to learn its datetime and its neighbours."""
        self.fetched.add(uri)
        status, answer, links = await self.http.head(uri, {}, "memento")
        if status >= 500 or status == 429:
            self.http.raise_for_status(status, answer, "memento", uri)
        if status >= 400:
            return  # unknown: the caller falls back to the TimeMap
        self._learn_datetime(uri, answer)
        self._learn(uri, links, uri)

    def _learn_datetime(self, uri: str, answer: CIMultiDictProxy[str]) -> None:
        value = answer.get("Memento-Datetime")
        if value:
            with contextlib.suppress(ValueError):  # a bad date: datetime stays unknown
                self.known.setdefault(uri, http_date_to_timestamp(value))

    def _learn(self, about: str, links: list[Link], base: str) -> None:
        """Record datetimes and neighbours from the Link header of a response about ``about``."""
        for link in links:
            if link.has_rel("original") and not self.original:
                self.original = urljoin(base, link.url)
            if not link.has_rel("memento"):
                continue
            memento = memento_from_link(link, base)
            uri = memento.uri if memento is not None else urljoin(base, link.url)
            if memento is not None:
                self.known.setdefault(uri, memento.timestamp)
            if link.has_rel("prev"):
                self.prev_of.setdefault(about, uri)
            if link.has_rel("next"):
                self.next_of.setdefault(about, uri)
            if link.has_rel("first"):
                self.prev_of[uri] = None
            if link.has_rel("last"):
                self.next_of[uri] = None


def _is_memento_answer(answer: CIMultiDictProxy[str], links: list[Link]) -> bool:
    """A TimeGate's 3xx (RFC 7089 §4.2.1: ``Vary: accept-datetime``, Memento links)
    rather than a plain redirect to another URL."""
    vary = ",".join(answer.getall("Vary", [])).lower()
    return "accept-datetime" in vary or any(
        link.has_rel("original") or link.has_rel("memento") for link in links
    )
