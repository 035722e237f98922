"""Fetch a capture from the live web and serve it as a WARC response record.

:class:`LiveLoader` is the loader of a ``$live`` source
(:mod:`gateway.sources.live`), the gateway's counterpart of pywb warcserver's
``LiveWebLoader``. For a capture it made (``source-coll`` equal to its
source's name, ``is_live`` set) it fetches ``load_url`` once and returns:

- the WARC/1.1 ``response`` record (a :class:`LiveLoadedRecord`) that the
  Resource API serves: status line and headers as the server sent them
  (order and case kept), the payload as received (``Content-Encoding``
  kept: nothing is decompressed), ``WARC-Payload-Digest`` and
  ``WARC-Block-Digest`` (``sha1:``), ``WARC-IP-Address`` of the peer;
- the matching WARC ``request`` record (:class:`RequestRecord`, on
  ``LiveLoadedRecord.request``) holding the request exactly as sent, linked
  by ``WARC-Concurrent-To``, for recording into a store later.

What is sent (RFC 9110/9112):

- for the default request (``LoadContext.request`` equal to
  ``WrappedRequest()``): a plain ``GET`` with ``Host``, the configured
  ``User-Agent`` (``client:`` section), ``Accept: */*`` and aiohttp's
  ``Accept-Encoding``;
- for a wrapped request (resource-post): its method, its headers in order
  and case, hop-by-hop headers included, and its body. Nothing is added but
  ``Host`` and ``Content-Length`` when missing (the message needs them). A
  ``Transfer-Encoding: chunked`` request is re-chunked on the wire (aiohttp
  writes that header after the others) and a ``Content-Length`` beside it is
  dropped (RFC 9112 §6.3: the pair is a request-smuggling vector).

Redirects are not followed: a live 3xx is the record it is (pywb does the
same for live captures). Cookies are never kept between fetches.

The payload is spooled (:class:`~gateway.loaders.warc_build.SpooledPayload`)
before the record is returned, because the digests go into the WARC header
block: at most ``spool_memory_bytes`` (1 MiB by default) per fetch stay in
memory, the rest goes to an anonymous temporary file. A payload larger than
``max_record_bytes`` (or announced larger by ``Content-Length``) aborts the
upstream read at once and raises
:class:`~gateway.loaders.warc_build.RecordTooLarge`.

Transfer-Encoding: aiohttp removes the chunked framing while reading, so
``Transfer-Encoding`` headers are kept as ``X-Archive-Orig-Transfer-Encoding``
(:func:`~gateway.loaders.warc_build.rename_transfer_encoding`), in the
response record and in the request record alike, as the remote replay loader
does; the WARC ``Content-Length`` frames the block.

Network policy: unless ``allow_private_networks``, the fetch goes through a
connector of :mod:`gateway.loaders.netpolicy` that refuses loopback, private,
link-local, metadata and other non-public addresses after DNS resolution, at
the connection itself. Refusals raise :class:`LiveFetchRefused` (a
:class:`~gateway.errors.LoadError`: the API answers 404 naming the reason).
The URL's host is checked as at the API's edge
(:func:`~gateway.cdx.hosts.normalize_url`, IDNA with UTS #46) before
anything connects: the API refuses such a URL with a 400 first, so this
only stops a capture made some other way.

The loader owns one ``aiohttp.ClientSession`` (created on first use, closed by
:meth:`LiveLoader.aclose`, which the source's ``aclose`` calls at app
shutdown): its connector carries the policy, its cookie jar is a
``DummyCookieJar``. Connection limits come from the shared client settings.
Sources and loaders take no timeout; aiohttp's default session timeout (5 min
in all, 30 s to connect) is only a backstop.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import aiohttp
from aiohttp.abc import AbstractResolver
from aiohttp.connector import Connection
from multidict import CIMultiDict
from yarl import URL

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.hosts import normalize_url
from gateway.cdx.query import now_timestamp
from gateway.clients import SharedClients
from gateway.errors import BadRequest, LiveFetchRefused, LoadError
from gateway.loaders.base import LoadContext, LoadedRecord, WrappedRequest
from gateway.loaders.netpolicy import ALLOWED_SCHEMES, DestinationRefused, check_ip_literal
from gateway.loaders.netpolicy import guarded_connector as _guarded_connector
from gateway.loaders.warc_build import (
    CHUNK_BYTES,
    DEFAULT_SPOOL_MEMORY_BYTES,
    RecordTooLarge,
    SpooledPayload,
    http_request_block,
    http_response_block,
    new_record_id,
    rename_transfer_encoding,
    response_record_headers,
    sha1_label,
    warc_date_from_timestamp,
    warc_header_block,
)

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "LiveFetchRefused",
    "LiveLoadedRecord",
    "LiveLoader",
    "RequestRecord",
    "with_scheme",
]

#: Default ``max_record_bytes`` of a live source: 100 MiB of payload.
DEFAULT_MAX_RECORD_BYTES: Final = 100 * 1024 * 1024
#: Longest status line / header line accepted from the live web (aiohttp: 8190).
_MAX_HEADER_LINE_BYTES: Final = 64 * 1024
#: What aiohttp would otherwise add to a wrapped request.
_SKIP_AUTO_HEADERS: Final = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE: Final = re.compile(r"[\r\n\x00]")
_DEFAULT_REQUEST: Final = WrappedRequest()


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestRecord:
    """The WARC ``request`` record of a live fetch (WARC 1.1 §6.4).

    ``warc_headers + http_headers + body`` is the record without its trailing
    ``CRLF CRLF``; ``record_id`` is its ``WARC-Record-ID``. Its
    ``WARC-Concurrent-To`` names the response record (WARC 1.1 §5.7); the
    request line and headers are those aiohttp sent, the body the one sent.
    """

    record_id: str
    warc_headers: bytes
    http_headers: bytes
    body: bytes

    def to_bytes(self) -> bytes:
        """The whole record, without the ``CRLF CRLF`` that follows it in a WARC file."""
        return self.warc_headers + self.http_headers + self.body


@dataclass(slots=True, kw_only=True)
class LiveLoadedRecord(LoadedRecord):
    """A :class:`LoadedRecord` of a live fetch, with the request record that made it.

    ``request`` holds the WARC request record (its payload is the request
    body, held in memory as the wrapped request already was).
    """

    request: RequestRecord | None = None


def with_scheme(url: str) -> str:
    """``url`` with ``http://`` added when it has no scheme (pywb does the same).

    >>> with_scheme("example.com/a")
    'http://example.com/a'
    >>> with_scheme("//example.com/a")
    'http://example.com/a'
    >>> with_scheme("https://example.com/")
    'https://example.com/'
    """
    if re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", url):
        return url
    return "http://" + url.removeprefix("//")


class LiveLoader:
    """Loads live captures of the source named ``name`` (see the module docstring).

    ``allow_private_networks`` turns the network policy off (tests, intranet
    archiving); ``max_record_bytes`` bounds the payload of one record;
    ``resolver`` replaces aiohttp's DNS resolution (the policy still applies
    to its answers); ``spool_memory_bytes`` is the in-memory part of the spool.
    """

    def __init__(
        self,
        name: str,
        *,
        clients: SharedClients,
        allow_private_networks: bool = False,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        resolver: AbstractResolver | None = None,
        spool_memory_bytes: int = DEFAULT_SPOOL_MEMORY_BYTES,
    ) -> None:
        if max_record_bytes <= 0:
            raise ValueError(f"max_record_bytes must be positive, got {max_record_bytes}")
        self.name = name
        self.clients = clients
        self.allow_private_networks = allow_private_networks
        self.max_record_bytes = max_record_bytes
        self.spool_memory_bytes = spool_memory_bytes
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None

    def accepts(self, capture: CdxRecord) -> bool:
        """True for live captures of this loader's source (``source-coll`` == ``name``)."""
        return (
            capture.fields.get("source-coll") == self.name
            and capture.fields.get("is_live", "") not in ("", "0", "false")
            and bool(capture.fields.get("load_url"))
        )

    def describe(self) -> str:
        policy = "private networks allowed" if self.allow_private_networks else "public only"
        return f"live web fetch ({policy}, max_record_bytes={self.max_record_bytes})"

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            settings = self.clients.settings
            connector = _guarded_connector(
                allow_private_networks=self.allow_private_networks,
                limit=settings.total_limit,
                limit_per_host=settings.limit_per_host,
                resolver=self._resolver,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                response_class=_PeerResponse,
                max_line_size=_MAX_HEADER_LINE_BYTES,
                max_field_size=_MAX_HEADER_LINE_BYTES,
            )
        return self._session

    async def aclose(self) -> None:
        """Close the loader's session and connector (idempotent)."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def load(self, capture: CdxRecord, ctx: LoadContext) -> LiveLoadedRecord:
        """Fetch ``capture``'s ``load_url`` now; see the module docstring.

        Raises :class:`LiveFetchRefused` (scheme, network policy),
        :class:`~gateway.loaders.warc_build.RecordTooLarge` (``max_record_bytes``),
        :class:`~gateway.errors.LoadError` (connection failed, reset, timed
        out, body truncated), :class:`~gateway.errors.BadRequest` (a wrapped
        request header that cannot be sent).
        """
        url = with_scheme(capture.fields.get("load_url") or capture.url)
        try:
            # Normalised at the edge already (gateway.cdx.hosts); checked
            # again here, as it is, so that no other path hands the resolver
            # a host IDNA refuses (getaddrinfo raises UnicodeError on "1..com").
            normalize_url(url)
            target = URL(url)
        except ValueError as exc:  # the host check, yarl: bad IPv6 literal, port
            raise LiveFetchRefused(f"live fetch of {url} refused: not a valid URL ({exc})") from exc
        if target.scheme not in ALLOWED_SCHEMES or not target.raw_host:
            raise LiveFetchRefused(
                f"live fetch of {url} refused: only http:// and https:// URLs with a host "
                "are fetched from the live web"
            )
        if not self.allow_private_networks:
            try:
                check_ip_literal(target.raw_host)
            except DestinationRefused as exc:
                raise LiveFetchRefused(f"live fetch of {url}: {exc}") from exc
        method, headers, body, chunked, skip = self._outgoing(ctx.request)
        timestamp = now_timestamp()
        try:
            response = await self._get_session().request(
                method,
                target,
                headers=headers,
                data=body or None,
                chunked=chunked,
                skip_auto_headers=skip,
                allow_redirects=False,
            )
        except aiohttp.ClientConnectorError as exc:
            raise self._connect_error(url, exc) from exc
        except aiohttp.ClientError as exc:
            raise LoadError(f"live fetch of {url} failed: {_describe(exc)}") from exc
        except TimeoutError as exc:
            raise LoadError(f"live fetch of {url} timed out before the response") from exc
        try:
            return await self._record(capture, url, timestamp, response, body)
        finally:
            response.release()

    def _outgoing(
        self, request: WrappedRequest
    ) -> tuple[str, CIMultiDict[str], bytes, bool | None, Sequence[str] | None]:
        """Method, headers, body, ``chunked`` and ``skip_auto_headers`` to send."""
        if request == _DEFAULT_REQUEST:
            return (
                "GET",
                CIMultiDict({"User-Agent": self.clients.settings.header_value()}),
                b"",
                None,
                None,
            )
        method = request.method
        if not _TOKEN.fullmatch(method):
            raise BadRequest("request", f"method {request.method!r} is not an HTTP token")
        headers: CIMultiDict[str] = CIMultiDict()
        chunked = False
        for name, value in request.headers:
            if not _TOKEN.fullmatch(name):
                raise BadRequest("request", f"header name {name!r} is not an HTTP token")
            if _BAD_VALUE.search(value):
                raise BadRequest("request", f"header {name}: value contains CR, LF or NUL")
            if name.lower() == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
                continue
            headers.add(name, value)
        if chunked:
            headers.popall("Content-Length", None)
        else:
            declared = headers.getall("Content-Length", [])
            if declared and any(value.strip() != str(len(request.body)) for value in declared):
                raise BadRequest(
                    "request",
                    f"Content-Length {', '.join(declared)} does not match the "
                    f"{len(request.body)}-byte body",
                )
        return method, headers, request.body, (True if chunked else None), _SKIP_AUTO_HEADERS

    def _too_large(self, what: str, detail: str) -> RecordTooLarge:
        return RecordTooLarge(
            f"{what} exceeds max_record_bytes={self.max_record_bytes} ({detail}); "
            "raise it in collections.yaml (max_record_bytes of the live source)"
        )

    def _connect_error(self, url: str, exc: aiohttp.ClientConnectorError) -> LoadError:
        if isinstance(exc.os_error, DestinationRefused) or "refused to connect to" in str(
            exc.os_error
        ):
            return LiveFetchRefused(f"live fetch of {url}: {exc.os_error}")
        return LoadError(f"live fetch of {url} failed: cannot connect ({exc.os_error})")

    async def _record(
        self,
        capture: CdxRecord,
        url: str,
        timestamp: str,
        response: aiohttp.ClientResponse,
        body: bytes,
    ) -> LiveLoadedRecord:
        """Read ``response`` into a spool and build both records."""
        peer_ip = _peer_ip(response)
        version = response.version
        protocol = f"HTTP/{version.major}.{version.minor}" if version else "HTTP/1.1"
        response_headers = rename_transfer_encoding(
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in response.raw_headers
        )
        http_block = http_response_block(
            response.status, response.reason or "", response_headers, protocol
        )
        what = f"live response for {url}"
        spool = SpooledPayload(
            http_headers=http_block,
            max_bytes=self.max_record_bytes,
            what=what,
            spool_memory_bytes=self.spool_memory_bytes,
        )
        try:
            announced = response.content_length
            if announced is not None and announced > self.max_record_bytes:
                raise self._too_large(what, f"Content-Length: {announced}")
            async for chunk in response.content.iter_chunked(CHUNK_BYTES):
                try:
                    spool.write(chunk)
                except RecordTooLarge:
                    raise self._too_large(
                        what, f"more than {self.max_record_bytes} payload bytes; not read further"
                    ) from None
        except RecordTooLarge:
            response.close()  # abort the upstream read: drop the connection
            await spool.close()
            raise
        except aiohttp.ClientError as exc:
            response.close()
            await spool.close()
            raise LoadError(f"live fetch of {url} failed while reading: {_describe(exc)}") from exc
        except TimeoutError as exc:
            response.close()
            await spool.close()
            raise LoadError(f"live fetch of {url} timed out while reading the body") from exc
        except BaseException:
            response.close()
            await spool.close()
            raise
        warc_date = warc_date_from_timestamp(timestamp)
        response_id = new_record_id()
        extra = [("WARC-IP-Address", peer_ip)] if peer_ip else []
        warc_headers = response_record_headers(
            target_uri=url,
            warc_date=warc_date,
            http_headers=http_block,
            spool=spool,
            record_id=response_id,
            extra=extra,
        )
        request = _request_record(response, url, warc_date, response_id, body, extra)
        served = capture.copy()
        served.timestamp = timestamp
        return LiveLoadedRecord(
            capture=served,
            warc_headers=warc_headers,
            http_headers=http_block,
            body=spool.chunks(),
            content_length=len(warc_headers) + len(http_block) + spool.length,
            target_uri=url,
            warc_date=warc_date,
            close=spool.close,
            request=request,
        )


def _request_record(
    response: aiohttp.ClientResponse,
    url: str,
    warc_date: str,
    response_id: str,
    body: bytes,
    extra: Sequence[tuple[str, str]],
) -> RequestRecord:
    """The WARC request record of what aiohttp sent for ``response``."""
    info = response.request_info
    http_block = http_request_block(
        info.method,
        info.url.raw_path_qs or "/",
        rename_transfer_encoding(info.headers.items()),
    )
    record_id = new_record_id()
    warc_headers = warc_header_block(
        record_type="request",
        record_id=record_id,
        warc_date=warc_date,
        content_type="application/http; msgtype=request",
        content_length=len(http_block) + len(body),
        target_uri=url,
        fields=[
            ("WARC-Concurrent-To", response_id),
            *extra,
            ("WARC-Payload-Digest", sha1_label(hashlib.sha1(body))),
            ("WARC-Block-Digest", sha1_label(hashlib.sha1(http_block + body))),
        ],
    )
    return RequestRecord(
        record_id=record_id, warc_headers=warc_headers, http_headers=http_block, body=body
    )


class _PeerResponse(aiohttp.ClientResponse):
    """A ClientResponse that notes the peer's IP address when it starts.

    A small body may be read, and its connection released, before
    ``session.request`` returns; the address is taken while the connection
    is still there.
    """

    peer_ip: str = ""

    async def start(self, connection: Connection) -> aiohttp.ClientResponse:
        transport = connection.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        self.peer_ip = str(peer[0]) if peer else ""
        return await super().start(connection)


def _peer_ip(response: aiohttp.ClientResponse) -> str:
    """The IP address the response came from ('' when unknown)."""
    return response.peer_ip if isinstance(response, _PeerResponse) else ""


def _describe(exc: aiohttp.ClientError) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
