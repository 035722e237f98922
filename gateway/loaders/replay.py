"""ReplayLoader: a capture found through a remote archive, loaded from its replay URL.

The loader of the remote sources (:mod:`gateway.sources.cdx_api`, the Memento
source): a capture they produced carries ``load_url``, the archive's raw
("identity", ``id_``) replay URL of the capture, e.g.
``https://web.archive.org/web/20140126200624id_/http://www.iana.org/``. The
loader fetches it and serves the answer as a **valid WARC/1.1 response
record** (:mod:`gateway.loaders.warc_build`), the counterpart of pywb
warcserver's ``LiveWebLoader`` used with a ``load_url``.

What is fetched:

- ``GET load_url`` with the shared session (``clients.session``), or, when
  ``ctx.request`` is not the default ``WrappedRequest()`` (resource-post),
  the client's method, headers (order kept) and body, without the headers of
  the client's own connection (``Host``, ``Content-Length``,
  ``Transfer-Encoding``, ``Connection`` and the other hop-by-hop ones: aiohttp
  writes the archive's); ``ctx.extra_headers`` are added. Every request asks
  for ``Accept-Encoding: identity`` so the archive adds no compression of its
  own over the archived payload (the payload is kept as the archive sends it:
  the session does not decompress).
- Redirects are not followed (``allow_redirects=False``): a 3xx memento is the
  archived redirect, i.e. the record. The one exception is the archive's own
  redirect to a canonical form of the same capture (pywb redirects
  ``.../id_/http://iana.org`` to ``.../id_/http://iana.org/``; Wayback
  redirects an inexact timestamp to the exact one): a 3xx that is not a
  memento (no ``Memento-Datetime``, no ``X-Archive-Orig-*`` header) whose
  ``Location`` is an ``id_`` URL under the same archive prefix for the same
  original URL (same SURT urlkey) is followed, with the same method and body,
  at most :data:`MAX_ARCHIVE_REDIRECTS` times.

What is served:

- the status line from the upstream response (the archived status, for
  archives serving ``id_`` mementos: pywb, Wayback);
- the archived HTTP headers: when the answer has ``X-Archive-Orig-*`` headers
  (pywb and Wayback prefix the originals that way) each is restored under
  its own name in place; the archive's headers are dropped: ``Link``,
  ``Memento-Datetime``, ``Content-Location``, other ``X-Archive-*``,
  ``Date``, ``Server``, hop-by-hop headers and any header whose original is
  also present. Without prefixed headers, the headers are kept but for
  hop-by-hop ones (and the three Memento headers when ``Memento-Datetime``
  is present). ``Location`` and ``Content-Location`` values that point into
  the archive (``<prefix><timestamp><mod>/<url>``) are turned back into
  ``<url>``, as pywb's ``unrewrite_header``;
- ``Transfer-Encoding`` is renamed ``X-Archive-Orig-Transfer-Encoding``
  (:func:`~gateway.loaders.warc_build.rename_transfer_encoding`): aiohttp
  removes the chunked framing, so the record must not claim it;
- WARC headers: ``WARC-Target-URI`` the capture's ``url``; ``WARC-Date`` the
  capture's timestamp, or the archive's ``Memento-Datetime`` when it says
  otherwise (it knows which memento it served); ``WARC-Source-URI`` the
  replay URL finally fetched; ``WARC-Payload-Digest``/``WARC-Block-Digest``
  computed; exact ``Content-Length``; a ``WARC-Record-ID`` stable for the same
  replay URL and payload.

Memory: the payload is spooled before the record is returned (its digests
go into the WARC header block): at most ``spool_memory_bytes`` in memory,
the rest in an anonymous temporary file; more than ``max_record_bytes``
(announced by ``Content-Length`` or counted) raises
:class:`~gateway.loaders.warc_build.RecordTooLarge`.

Failures are :class:`~gateway.errors.LoadError` subclasses, so the Resource
API tries the next capture: :class:`UpstreamStatusError` (an HTTP status of
400 or more that is not a memento: the archive's own error page),
:class:`UpstreamUnreachable` (connection refused, reset, cut-off body),
:class:`TooManyArchiveRedirects`, :class:`~gateway.errors.SelfRedirect`
(an archived 3xx to the requested URL, as for WARC records).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, urljoin

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.cdx.memento import http_date_to_timestamp
from gateway.clients import SharedClients
from gateway.errors import (
    LoadError,
    SelfRedirect,
    TooManyArchiveRedirects,
    UpstreamLoadError,
    UpstreamStatusError,
    UpstreamUnreachable,
)
from gateway.loaders.base import LoadContext, LoadedRecord, WrappedRequest
from gateway.loaders.warc import is_self_redirect
from gateway.loaders.warc_build import (
    CHUNK_BYTES,
    DEFAULT_SPOOL_MEMORY_BYTES,
    HOP_BY_HOP,
    RecordTooLarge,
    SpooledPayload,
    http_response_block,
    rename_transfer_encoding,
    response_record_headers,
    spooled_record,
    stable_record_id,
    warc_date_from_timestamp,
)

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "MAX_ARCHIVE_REDIRECTS",
    "ReplayLoader",
    "ReplayUrl",
    "TooManyArchiveRedirects",
    "UpstreamLoadError",
    "UpstreamStatusError",
    "UpstreamUnreachable",
    "requote_url",
    "restore_archived_headers",
    "split_replay_url",
]

logger = logging.getLogger(__name__)

#: Default largest payload a remote record may have (bytes).
DEFAULT_MAX_RECORD_BYTES: Final = 256 * 1024 * 1024
#: Archive redirects to the same capture followed before giving up.
MAX_ARCHIVE_REDIRECTS: Final = 3

_ORIG_PREFIX: Final = "x-archive-orig-"
_MEMENTO_HEADERS: Final = frozenset({"link", "memento-datetime", "content-location"})
#: Headers of the archive itself when it also sends prefixed originals.
_ARCHIVE_OWN: Final = frozenset({"date", "server"})
#: Client request headers that describe the client's connection to the gateway.
_NOT_FORWARDED: Final = HOP_BY_HOP | {"host", "content-length"}
_REPLAY_URL = re.compile(
    r"(?P<prefix>https?://[^?#]*?/)(?P<timestamp>\d{1,14})(?P<mod>[a-z]{2}_)?/(?P<url>.+)\Z",
    re.IGNORECASE | re.DOTALL,
)
#: Characters left as they are when a URL is re-quoted (reserved, unreserved, %).
_URL_SAFE: Final = "!#$%&'()*+,/:;=?@[]~"


@dataclass(frozen=True, slots=True)
class ReplayUrl:
    """A Wayback-style replay URL ``<prefix><timestamp><mod>/<url>`` split in parts."""

    prefix: str
    timestamp: str
    mod: str
    url: str


def _served_uri(capture: CdxRecord, resp: aiohttp.ClientResponse) -> str | None:
    """The original URL the archive says it served (RFC 7089 §4.1.1
    ``Content-Location`` of a memento) when it names a capture of the same
    urlkey under another spelling (``http://iana.org`` vs ``http://www.iana.org/``)."""
    location = resp.headers.get("Content-Location")
    if not location:
        return None
    parts = split_replay_url(urljoin(str(resp.url), location))
    if parts is None:
        return None
    try:
        same = canonical_urlkey(parts.url) == capture.urlkey
    except ValueError:
        return None
    return parts.url if same else None


def split_replay_url(url: str) -> ReplayUrl | None:
    """Split a Wayback-style replay URL; None when ``url`` is not one.

    >>> split_replay_url("http://a.org/web/20140126200624id_/http://iana.org/x?y=1")
    ReplayUrl(prefix='http://a.org/web/', timestamp='20140126200624', mod='id_', url='http://iana.org/x?y=1')
    >>> split_replay_url("http://a.org/page") is None
    True
    """
    match = _REPLAY_URL.match(url)
    if match is None:
        return None
    return ReplayUrl(
        match["prefix"], match["timestamp"], (match["mod"] or "").lower(), match["url"]
    )


def requote_url(url: str) -> str:
    """Percent-encode the characters a URL may not hold (spaces, non-ASCII, quotes).

    Existing ``%XX`` escapes and reserved characters are kept.

    >>> requote_url("http://a.org/x y/é?q=<1>")
    'http://a.org/x%20y/%C3%A9?q=%3C1%3E'
    """
    return quote(url, safe=_URL_SAFE)


def _unrewrite(value: str, replay_url: str | None) -> str:
    """``<prefix><ts><mod>/<url>`` -> ``<url>`` when ``value`` (maybe relative to
    ``replay_url``) points into the same archive as ``replay_url``."""
    here = split_replay_url(replay_url) if replay_url else None
    if here is None or replay_url is None:
        return value
    there = split_replay_url(urljoin(replay_url, value))
    return there.url if there is not None and there.prefix == here.prefix else value


def restore_archived_headers(
    headers: Sequence[tuple[str, str]], replay_url: str | None = None
) -> list[tuple[str, str]]:
    """The archived HTTP headers of a replayed memento, in order (see module doc).

    ``replay_url`` is the URL the headers were fetched from: ``Location`` and
    ``Content-Location`` values pointing into the same archive are turned back
    into the original URL.

    >>> restore_archived_headers([
    ...     ("X-Archive-Orig-Server", "Apache"), ("Content-Type", "text/html"),
    ...     ("X-Archive-Orig-Transfer-Encoding", "chunked"),
    ...     ("Memento-Datetime", "Sun, 26 Jan 2014 20:06:24 GMT"),
    ...     ("Date", "Sat, 21 Nov 2026 18:58:57 GMT"), ("Transfer-Encoding", "chunked")])
    [('Server', 'Apache'), ('Content-Type', 'text/html'), \
('X-Archive-Orig-Transfer-Encoding', 'chunked')]
    """
    lowered = [name.lower() for name, _ in headers]
    originals = {name[len(_ORIG_PREFIX) :] for name in lowered if name.startswith(_ORIG_PREFIX)}
    prefixed = bool(originals)
    memento = prefixed or "memento-datetime" in lowered
    out: list[tuple[str, str]] = []
    for (name, value), lower in zip(headers, lowered, strict=True):
        if lower.startswith(_ORIG_PREFIX):
            name = name[len(_ORIG_PREFIX) :]
            lower = lower[len(_ORIG_PREFIX) :]
        elif (
            lower in HOP_BY_HOP
            or lower.startswith("x-archive-")
            or (memento and lower in _MEMENTO_HEADERS)
            or (prefixed and (lower in originals or lower in _ARCHIVE_OWN))
        ):
            continue
        if lower in ("location", "content-location"):
            value = _unrewrite(value, replay_url)
        out.append((name, value))
    return rename_transfer_encoding(out)


def _is_memento(headers: Mapping[str, str]) -> bool:
    return "Memento-Datetime" in headers or any(
        name.lower().startswith(_ORIG_PREFIX) for name in headers
    )


class ReplayLoader:
    """Loads captures of one remote source from their ``load_url`` (see module doc).

    ``name`` is the configured name of the source whose captures it loads:
    :meth:`accepts` is true only for captures with a ``load_url`` and a
    ``source-coll`` equal to it. ``max_record_bytes`` bounds the payload;
    ``spool_memory_bytes`` the part of it held in memory.
    """

    def __init__(
        self,
        *,
        name: str,
        clients: SharedClients,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        spool_memory_bytes: int = DEFAULT_SPOOL_MEMORY_BYTES,
    ) -> None:
        self.name = name
        self.clients = clients
        self.max_record_bytes = max_record_bytes
        self.spool_memory_bytes = spool_memory_bytes

    def accepts(self, capture: CdxRecord) -> bool:
        """True for captures of this loader's source that carry a ``load_url``."""
        return bool(capture.fields.get("load_url")) and (
            capture.fields.get("source-coll") == self.name
        )

    def describe(self) -> str:
        return (
            f"remote replay (id_) records of {self.name!r}, "
            f"up to {self.max_record_bytes} bytes each"
        )

    def __repr__(self) -> str:
        return f"ReplayLoader(name={self.name!r})"

    async def load(self, capture: CdxRecord, ctx: LoadContext) -> LoadedRecord:
        """Fetch ``capture.fields["load_url"]`` and return it as a WARC/1.1 response record.

        Raises :class:`UpstreamStatusError`, :class:`UpstreamUnreachable`,
        :class:`TooManyArchiveRedirects`, :class:`~gateway.errors.SelfRedirect`,
        :class:`~gateway.loaders.warc_build.RecordTooLarge` or a plain
        :class:`~gateway.errors.LoadError` (no ``load_url``).
        """
        load_url = capture.fields.get("load_url", "")
        if not load_url:
            raise LoadError(f"capture {capture.timestamp} {capture.url} has no load_url")
        method, headers, body = self._request_parts(ctx)
        url = requote_url(load_url)
        original_key = _urlkey_or_none(capture.url)
        hops = 0
        while True:
            resp = await self._send(method, url, headers, body)
            try:
                location = resp.headers.get("Location")
                if 300 <= resp.status < 400 and location and not _is_memento(resp.headers):
                    target = requote_url(urljoin(url, location))
                    if _same_capture(url, target, original_key):
                        if hops >= MAX_ARCHIVE_REDIRECTS:
                            raise TooManyArchiveRedirects(
                                f"{load_url}: the archive redirected more than "
                                f"{MAX_ARCHIVE_REDIRECTS} times (last to {target})"
                            )
                        hops += 1
                        url = target
                        continue
                return await self._record(capture, ctx, method, url, resp)
            finally:
                resp.release()

    # ------------------------------------------------------------------ internals
    def _request_parts(self, ctx: LoadContext) -> tuple[str, CIMultiDict[str], bytes | None]:
        request = ctx.request
        headers: CIMultiDict[str] = CIMultiDict()
        if request != WrappedRequest():
            for name, value in request.headers:
                if name.lower() not in _NOT_FORWARDED:
                    headers.add(name, value)
        for name, value in ctx.extra_headers.items():
            headers[name] = value
        headers["Accept-Encoding"] = "identity"
        return request.method, headers, (request.body or None)

    async def _send(
        self, method: str, url: str, headers: CIMultiDict[str], body: bytes | None
    ) -> aiohttp.ClientResponse:
        try:
            return await self.clients.session.request(
                method,
                URL(url, encoded=True),
                headers=headers,
                data=body,
                allow_redirects=False,
            )
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(f"{url}: cannot fetch from the archive: {exc}") from exc
        except ValueError as exc:  # yarl/aiohttp reject a malformed URL
            raise UpstreamUnreachable(f"{url}: not a URL that can be fetched: {exc}") from exc

    async def _record(
        self,
        capture: CdxRecord,
        ctx: LoadContext,
        method: str,
        url: str,
        resp: aiohttp.ClientResponse,
    ) -> LoadedRecord:
        if resp.status >= 400 and not _is_memento(resp.headers):
            status = f"{resp.status} {resp.reason}" if resp.reason else str(resp.status)
            raise UpstreamStatusError(
                f"{url}: HTTP {status} from the archive (an error page, not a memento)",
                resp.status,
            )
        parts = split_replay_url(url)
        raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.raw_headers]
        headers = restore_archived_headers(raw, url)
        location = next((v for k, v in headers if k.lower() == "location"), None)
        if not ctx.as_stored and is_self_redirect(
            ctx.request_url, capture, str(resp.status), location
        ):
            raise SelfRedirect(
                f"{url}: HTTP {resp.status} redirects to the requested URL ({location}); "
                "skipped to avoid a redirect loop"
            )
        target_uri = _served_uri(capture, resp) or capture.url or (parts.url if parts else url)
        timestamp = capture.timestamp
        memento_date = resp.headers.get("Memento-Datetime")
        if memento_date:
            try:
                timestamp = http_date_to_timestamp(memento_date)
            except ValueError:
                logger.warning("%s: ignoring bad Memento-Datetime %r", url, memento_date)
        warc_date = warc_date_from_timestamp(timestamp)
        version = f"HTTP/{resp.version.major}.{resp.version.minor}" if resp.version else "HTTP/1.1"
        http_block = http_response_block(resp.status, resp.reason or "", headers, version)
        announced = resp.content_length
        if announced is not None and announced > self.max_record_bytes:
            raise RecordTooLarge(
                f"{url}: payload of {announced} bytes (Content-Length) is larger than "
                f"max_record_bytes={self.max_record_bytes}; raise max_record_bytes in the "
                "source's config to load it"
            )
        spool = SpooledPayload(
            http_headers=http_block,
            max_bytes=self.max_record_bytes,
            what=url,
            spool_memory_bytes=self.spool_memory_bytes,
        )
        try:
            if method.upper() != "HEAD":
                try:
                    async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                        spool.write(chunk)
                except aiohttp.ClientError as exc:
                    raise UpstreamUnreachable(
                        f"{url}: the archive's answer broke off after {spool.length} "
                        f"payload bytes: {exc}"
                    ) from exc
            warc_headers = response_record_headers(
                target_uri=target_uri,
                warc_date=warc_date,
                http_headers=http_block,
                spool=spool,
                record_id=stable_record_id(url, warc_date, spool.payload_digest),
                extra=[("WARC-Source-URI", url)],
            )
        except BaseException:
            await spool.close()
            raise
        return spooled_record(
            capture, warc_headers, http_block, spool, target_uri=target_uri, warc_date=warc_date
        )


def _urlkey_or_none(url: str) -> str | None:
    try:
        return canonical_urlkey(url) if url else None
    except ValueError:
        return None


def _same_capture(current: str, target: str, original_key: str | None) -> bool:
    """True when ``target`` is an ``id_`` URL of the same archive for the same original."""
    here, there = split_replay_url(current), split_replay_url(target)
    if here is None or there is None or there.mod != "id_" or here.prefix != there.prefix:
        return False
    key = original_key or _urlkey_or_none(here.url)
    return key is not None and _urlkey_or_none(there.url) == key
