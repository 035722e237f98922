"""A Memento archive (RFC 7089) played by a real aiohttp server, for tests.

:class:`MementoArchive` serves a fixed set of captures under ``prefix``
(default ``/web/``) the way wayback-style archives do:

``{prefix}timemap/link/{url}``
    the TimeMap (``application/link-format``): ``self``, ``timegate``,
    ``original`` and one ``rel="memento"`` link per capture with the urlkey of
    ``url`` (in capture order, or shuffled with ``shuffle=True``; gzip-encoded
    with ``gzip=True``); 404 with an empty body when there is none.
``{prefix}{timestamp}{mod}/{url}``
    a memento: ``Memento-Datetime``, a ``Link`` header (``original``,
    ``timegate``, ``timemap``, the memento itself and, with ``chain=True``,
    its ``first``/``prev``/``next``/``last`` memento neighbours, relation
    types combined when they name the same memento, as the Internet Archive
    does) and the body ``payload of {url} at {timestamp}``.
``{prefix}{url}``
    the TimeGate, selecting the capture closest to ``Accept-Datetime`` (ties
    to the earlier one; the latest without the header). ``timegate``:
    ``"302"`` (RFC 7089 pattern 2.1: ``Location``, ``Vary``, ``Link`` with
    the navigation links when ``chain``), ``"200"`` (pattern 2.2: the memento
    itself with ``Content-Location``) or ``"pywb"`` (200 with neither
    ``Content-Location`` nor navigation links, only the selected
    ``rel="memento"``, as pywb 2.10 answers a ``HEAD``).

Memento URIs are ``{base}{prefix}{timestamp}mp_/{url}`` (``id_`` with
``id_uris=True``). Every request is recorded in :attr:`MementoArchive.requests`
as ``(method, kind, raw path)`` with kind ``timemap``, ``memento`` or
``timegate``.
"""

from __future__ import annotations

import gzip as gzip_module
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from aiohttp import web

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.cdx.cdxops import timestamp_to_seconds
from gateway.cdx.memento import http_date_to_timestamp, timestamp_to_http_date

TimeGateStyle = Literal["302", "200", "pywb"]
_MEMENTO_PATH = re.compile(r"(\d{14})([a-z]{2}_)?/(.+)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Capture:
    urlkey: str
    timestamp: str
    url: str


@dataclass(slots=True)
class MementoArchive:
    """See the module docstring; build with :meth:`of` or :meth:`from_cdxj`."""

    by_key: dict[str, list[Capture]]
    prefix: str = "/web/"
    timegate: TimeGateStyle = "302"
    chain: bool = True
    id_uris: bool = False
    shuffle: bool = False
    gzip: bool = False
    requests: list[tuple[str, str, str]] = field(default_factory=list)

    @classmethod
    def of(cls, captures: Iterable[tuple[str, str]], **options: object) -> MementoArchive:
        """An archive of ``(url, timestamp)`` captures."""
        by_key: dict[str, list[Capture]] = {}
        for url, timestamp in captures:
            key = canonical_urlkey(url)
            by_key.setdefault(key, []).append(Capture(key, timestamp, url))
        for items in by_key.values():
            items.sort(key=lambda c: (c.timestamp, c.url))
        return cls(by_key, **options)  # type: ignore[arg-type]

    @classmethod
    def from_cdxj(cls, lines: Iterable[bytes], **options: object) -> MementoArchive:
        """An archive of the captures of CDXJ lines (their ``url`` and timestamp)."""
        records = [CdxRecord.parse(line) for line in lines if line.strip()]
        return cls.of(((r.url, r.timestamp) for r in records), **options)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", self.prefix + "{rest:.*}", self.handle)
        return app

    def count(self, kind: str, method: str | None = None) -> int:
        """Requests of ``kind`` (and ``method``) received so far."""
        return sum(1 for m, k, _ in self.requests if k == kind and method in (None, m))

    # ------------------------------------------------------------------ routes
    async def handle(self, request: web.Request) -> web.StreamResponse:
        base = f"{request.scheme}://{request.host}{self.prefix}"
        rest = request.raw_path[len(self.prefix) :]
        if rest.startswith("timemap/link/"):
            self.requests.append((request.method, "timemap", request.raw_path))
            return self._timemap(rest[len("timemap/link/") :], base)
        match = _MEMENTO_PATH.fullmatch(rest)
        if match is not None:
            self.requests.append((request.method, "memento", request.raw_path))
            return self._memento(match.group(3), match.group(1), base)
        self.requests.append((request.method, "timegate", request.raw_path))
        return self._timegate(request, rest, base)

    def _captures(self, url: str) -> list[Capture]:
        try:
            return self.by_key.get(canonical_urlkey(url), [])
        except ValueError:
            return []

    def memento_uri(self, base: str, capture: Capture) -> str:
        mod = "id_" if self.id_uris else "mp_"
        return f"{base}{capture.timestamp}{mod}/{capture.url}"

    def _timemap(self, url: str, base: str) -> web.Response:
        captures = list(self._captures(url))
        if not captures:
            return web.Response(status=404, content_type="application/link-format")
        if self.shuffle:
            random.Random(url).shuffle(captures)
        lines = [
            f'<{base}timemap/link/{url}>; rel="self"; type="application/link-format"',
            f'<{base}{url}>; rel="timegate"',
            f'<{url}>; rel="original"',
        ]
        for capture in captures:
            date = timestamp_to_http_date(capture.timestamp)
            lines.append(f'<{self.memento_uri(base, capture)}>; rel="memento"; datetime="{date}"')
        body = (",\n".join(lines) + "\n").encode()
        headers = {"Content-Type": "application/link-format"}
        if self.gzip:
            body = gzip_module.compress(body)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    def _links(self, url: str, base: str, captures: list[Capture], index: int) -> str:
        """Link header about ``captures[index]`` (navigation only when ``chain``)."""
        links = [
            f'<{url}>; rel="original"',
            f'<{base}{url}>; rel="timegate"',
            f'<{base}timemap/link/{url}>; rel="timemap"; type="application/link-format"',
        ]
        rels: dict[int, list[str]] = {index: ["memento"]}
        if self.chain:
            for position, rel in (
                (0, "first"),
                (index - 1, "prev"),
                (index + 1, "next"),
                (len(captures) - 1, "last"),
            ):
                if 0 <= position < len(captures):
                    rels.setdefault(position, ["memento"]).insert(0, rel)
        for position, names in sorted(rels.items()):
            capture = captures[position]
            date = timestamp_to_http_date(capture.timestamp)
            uri = self.memento_uri(base, capture)
            links.append(f'<{uri}>; rel="{" ".join(names)}"; datetime="{date}"')
        return ", ".join(links)

    def _memento(self, url: str, timestamp: str, base: str) -> web.Response:
        captures = self._captures(url)
        found = [i for i, c in enumerate(captures) if (c.timestamp, c.url) == (timestamp, url)]
        if not found:
            return web.Response(status=404, text="no such memento")
        index = found[0]
        headers = {
            "Memento-Datetime": timestamp_to_http_date(timestamp),
            "Link": self._links(url, base, captures, index),
        }
        return web.Response(text=f"payload of {url} at {timestamp}", headers=headers)

    def _timegate(self, request: web.Request, url: str, base: str) -> web.Response:
        captures = self._captures(url)
        if not captures:
            return web.Response(status=404, text="not archived")
        accept = request.headers.get("Accept-Datetime")
        if accept:
            target = timestamp_to_seconds(http_date_to_timestamp(accept))
            index = min(
                range(len(captures)),
                key=lambda i: (abs(timestamp_to_seconds(captures[i].timestamp) - target), i),
            )
        else:
            index = len(captures) - 1
        selected = captures[index]
        uri = self.memento_uri(base, selected)
        if self.timegate == "pywb":
            date = timestamp_to_http_date(selected.timestamp)
            link = (
                f'<{url}>; rel="original", <{base}{url}>; rel="timegate", '
                f'<{base}timemap/link/{url}>; rel="timemap"; type="application/link-format", '
                f'<{uri}>; rel="memento"; datetime="{date}"'
            )
            return web.Response(text="the memento", headers={"Link": link})
        headers = {"Link": self._links(url, base, captures, index), "Vary": "accept-datetime"}
        if self.timegate == "302":
            headers["Location"] = uri
            return web.Response(status=302, headers=headers)
        headers["Content-Location"] = uri
        headers["Memento-Datetime"] = timestamp_to_http_date(selected.timestamp)
        return web.Response(text=f"payload of {selected.url}", headers=headers)
