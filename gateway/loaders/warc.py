"""WarcLoader: a capture's ``filename``/``offset``/``length`` -> one WARC record.

Behaviour follows pywb's warcserver ``WARCPathLoader`` and ``ResolvingLoader``
(pywb 2.10), so the served bytes are the same as pywb's ``/resource`` body:

- the record is found through the configured resolvers in order (prefixes,
  path indexes; :mod:`gateway.loaders.resolvers`), each candidate location
  tried until one holds a parsable record;
- output is the WARC header block re-serialized as warcio does
  (``StatusAndHeaders.to_bytes()``, written by
  :func:`~gateway.loaders.warc_headers.block_bytes`), the HTTP header block
  re-serialized the same way, then the rest of the block, streamed; the WARC
  ``Content-Length`` is adjusted by the difference between the re-serialized
  HTTP headers and the bytes they were parsed from; no trailing
  ``CRLF CRLF``;
- ARC records are served as WARC/1.0 ``response`` records (warcio
  ``arc2warc``);
- revisits (CDX ``mime`` ``warc/revisit`` or ``WARC-Type: revisit``, WARC 1.1
  §6.7): a 3xx revisit is served as is with ``Content-Length: 0`` in its HTTP
  headers, as is a revisit of the empty payload (digest
  ``3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ``); otherwise the original is looked up
  with ``ctx.find_original(WARC-Refers-To-Target-URI, WARC-Refers-To-Date,
  digest)`` and served with the original's WARC headers (``WARC-Target-URI``
  and ``WARC-Date`` replaced by the revisit's, ``WARC-Refers-To-Target-URI``
  and ``WARC-Refers-To-Date`` set to the original's), the revisit's HTTP
  headers (the original's if the revisit has none) and the original's payload;
- a 3xx capture (not 304) whose ``Location`` is the requested URL is refused
  with :class:`~gateway.errors.SelfRedirect` (pywb ``raise_on_self_redirect``);
- with ``ctx.as_stored`` (the WACZ export) neither happens: a revisit is
  served as stored, a redirect to itself too;
- with ``ctx.gzip_member`` (``compress=gzip``), a record stored as its own
  gzip member and served exactly as stored (its re-serialized header blocks
  equal the stored bytes; not a resolved revisit, not ARC) also offers that
  member (:attr:`~gateway.loaders.base.LoadedRecord.stored_gzip`), and is
  inflated only as far as its header blocks.

Deliberate differences from pywb:

- a revisit without ``WARC-Refers-To-Target-URI`` (wget writes only
  ``WARC-Refers-To``) is resolved by its own URL and digest instead of failing;
- a ``sha1:`` prefix on the CDX digest does not defeat the empty-digest
  shortcut; a candidate original that turns out to be a revisit is skipped;
- ``request`` records keep their HTTP header block (pywb drops it, leaving
  the WARC ``Content-Length`` wrong); a blank HTTP header block consumed by
  the parser is accounted for in ``Content-Length`` as well;
- records converted from ARC get a stable ``WARC-Record-ID`` (a UUID 5 of
  filename and offset) instead of a fresh random one per request;
- a record cut short (truncated file or gzip member) aborts the response with
  :class:`~gateway.errors.RecordFormatError` instead of ending it early.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self
from urllib.parse import urlsplit

from warcio.timeutils import iso_date_to_timestamp, timestamp_to_iso_date

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.clients import SharedClients
from gateway.errors import (
    ArchiveFileNotFound,
    ArchiveUnavailable,
    GatewayError,
    LoadError,
    PlaceUnreachable,
    RecordFormatError,
    RecordFramingError,
    RevisitUnresolved,
    SelfRedirect,
    UnsafeFilename,
)
from gateway.loaders.base import LoadContext, LoadedRecord, LoaderConfig, ResourceLoader
from gateway.loaders.resolvers import (
    Resolver,
    ResolverConfig,
    build_resolver,
    resolver_config_from_shorthand,
)
from gateway.loaders.warc_headers import block_bytes
from gateway.loaders.warc_reader import OpenedRecord, open_record

if TYPE_CHECKING:
    import aiohttp

__all__ = ["EMPTY_DIGEST", "WarcLoader", "WarcLoaderConfig", "is_self_redirect"]

logger = logging.getLogger(__name__)

#: SHA-1 (base 32) of the empty payload (pywb ``ResolvingLoader.EMPTY_DIGEST``).
EMPTY_DIGEST: Final = "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"
_HTTP_RECORD_TYPES: Final = ("response", "revisit", "request")
_ARC_ID_NAMESPACE: Final = uuid.UUID("6d3c9a1e-3f57-4a59-9d2e-52a4f1a0c0de")


#: How telling a failure at one place is, least first: when no place serves the record,
#: the most telling one is raised. A place that was not reached may hold the record when
#: it is back (503, :mod:`gateway.index.collection`); bytes that are not a record (a
#: damaged file) say more than a file missing from one place.
_FAILURE_RANK: Final[tuple[type[LoadError], ...]] = (
    ArchiveFileNotFound,
    LoadError,
    RecordFormatError,
    RecordFramingError,  # a record there, but its length unreadable: the more precise
    ArchiveUnavailable,
    PlaceUnreachable,
)


def _worse(worst: type[LoadError], failed: type[LoadError]) -> type[LoadError]:
    """The more telling of two failures, as its class in :data:`_FAILURE_RANK`."""

    def rank(kind: type[LoadError]) -> int:
        return max(i for i, known in enumerate(_FAILURE_RANK) if issubclass(kind, known))

    return _FAILURE_RANK[max(rank(worst), rank(failed))]


@dataclass(frozen=True, slots=True, kw_only=True)
class WarcLoaderConfig:
    """The ``resource:`` entries of one collection step, tried in order.

    ``chunk_bytes`` is the size of each read from a file or HTTP body (the
    default 256 KiB reads most records whole, in one read and one inflate:
    see :mod:`gateway.loaders.warc_stream`); records whose CDX ``length`` is
    at most ``inline_read_max_bytes`` are read on the event loop, longer ones
    through a worker thread.
    """

    resolvers: tuple[ResolverConfig, ...]
    chunk_bytes: int = 256 * 1024
    inline_read_max_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if not self.resolvers:
            raise ValueError("a WARC loader needs at least one resource prefix or path index")
        if self.chunk_bytes < 1024:
            raise ValueError(f"chunk_bytes {self.chunk_bytes}: expected at least 1024")
        if self.inline_read_max_bytes < 0:
            raise ValueError(f"inline_read_max_bytes {self.inline_read_max_bytes}: expected >= 0")

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """One resolver from its shorthand (see :mod:`gateway.loaders.resolvers`)."""
        return cls(resolvers=(resolver_config_from_shorthand(text),))

    @classmethod
    def from_shorthands(cls, texts: Sequence[str]) -> Self:
        """Several resolvers, in order, from their shorthand strings."""
        return cls(resolvers=tuple(resolver_config_from_shorthand(text) for text in texts))


class WarcLoader:
    """Loads captures that name a WARC/ARC ``filename`` and an ``offset``."""

    config_type: ClassVar[type[LoaderConfig]] = WarcLoaderConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = ("warc-prefix+", "warc-index+")

    def __init__(
        self,
        config: WarcLoaderConfig,
        *,
        clients: SharedClients,
        resolvers: Sequence[Resolver] | None = None,
    ) -> None:
        self.config = config
        self.clients = clients
        if resolvers is None:
            resolvers = [build_resolver(rc, clients=clients) for rc in config.resolvers]
        self.resolvers: tuple[Resolver, ...] = tuple(resolvers)
        self._session: Callable[[], aiohttp.ClientSession] = lambda: clients.session

    @classmethod
    def from_config(cls, config: LoaderConfig, *, clients: SharedClients) -> ResourceLoader:
        if not isinstance(config, WarcLoaderConfig):
            raise TypeError(f"expected WarcLoaderConfig, got {type(config).__name__}")
        return cls(config, clients=clients)

    def accepts(self, capture: CdxRecord) -> bool:
        """True when the capture has a ``filename`` (not ``-``) and an ``offset``."""
        filename = capture.fields.get("filename")
        return bool(filename) and filename != "-" and capture.offset is not None

    def describe(self) -> str:
        return "WARC records from " + "; then ".join(r.describe() for r in self.resolvers)

    # ------------------------------------------------------------------ load
    async def load(self, capture: CdxRecord, ctx: LoadContext) -> LoadedRecord:
        """Load ``capture``'s record, resolving revisits (see the module docstring).

        Raises :class:`ArchiveFileNotFound`, :class:`UnsafeFilename`,
        :class:`RecordFormatError`, :class:`RevisitUnresolved`,
        :class:`SelfRedirect` or :class:`LoadError` (other I/O failures).
        """
        offset = capture.offset
        if offset is None or not self.accepts(capture):
            raise LoadError(f"capture {capture.url} {capture.timestamp} has no filename/offset")
        head = await self._open(capture.filename, offset, capture.length, ctx.gzip_member)
        payload = head
        try:
            if not ctx.as_stored and (capture.mime == "warc/revisit" or head.rec_type == "revisit"):
                payload = await self._revisit_payload(capture, head, ctx)
            return self._assemble(capture, head, payload, ctx)
        except BaseException:
            head.close()
            payload.close()
            raise

    async def _open(
        self, filename: str, offset: int, length: int | None, gzip_member: bool = False
    ) -> OpenedRecord:
        looked: dict[str, str] = {}
        unsafe: UnsafeFilename | None = None
        worst: type[LoadError] = ArchiveFileNotFound
        for resolver in self.resolvers:
            try:
                locations = await resolver.locate(filename)
            except UnsafeFilename as exc:
                unsafe = exc
                continue
            except LoadError as exc:
                looked[resolver.describe()] = exc.message
                worst = _worse(worst, type(exc))
                continue
            for location in locations:
                where = str(location)
                try:
                    opened = await open_record(
                        location,
                        offset,
                        length,
                        session=self._session,
                        chunk_bytes=self.config.chunk_bytes,
                        inline_read_max_bytes=self.config.inline_read_max_bytes,
                        gzip_member=gzip_member,
                    )
                except ArchiveFileNotFound as exc:
                    looked[where] = exc.errors.get(where, exc.message)
                except LoadError as exc:
                    looked[where] = exc.message
                    worst = _worse(worst, type(exc))
                else:
                    if opened.is_arc:
                        record_id = uuid.uuid5(_ARC_ID_NAMESPACE, f"{filename}#{offset}")
                        opened.record.rec_headers.replace_header(
                            "WARC-Record-ID", f"<urn:uuid:{record_id}>"
                        )
                    return opened
        if unsafe is not None and worst is ArchiveFileNotFound:
            raise unsafe
        if not looked:
            raise ArchiveFileNotFound(
                f"WARC file {filename!r}: no configured resolver knows it ({self.describe()})",
                {filename: "not in any path index"},
            )
        details = "; ".join(
            reason if reason.startswith(where) else f"{where}: {reason}"
            for where, reason in looked.items()
        )
        if worst is ArchiveFileNotFound:
            raise ArchiveFileNotFound(
                f"WARC file {filename!r} not found; looked in {details}", looked
            )
        raise worst(
            f"WARC file {filename!r} offset {offset} could not be loaded: {details}", looked
        )

    # --------------------------------------------------------------- revisit
    async def _revisit_payload(
        self, capture: CdxRecord, head: OpenedRecord, ctx: LoadContext
    ) -> OpenedRecord:
        http = head.record.http_headers
        if http and http.get_statuscode().startswith("3"):
            # pywb: a redirect's payload is never shown, so do not look it up.
            http.replace_header("Content-Length", "0")
            return head
        digest = capture.digest
        if digest.rpartition(":")[2] == EMPTY_DIGEST:
            return head  # the payload is empty: nothing to look up
        rec_headers = head.record.rec_headers
        url = (
            rec_headers.get_header("WARC-Refers-To-Target-URI")
            or capture.url
            or rec_headers.get_header("WARC-Target-URI")
            or ""
        )
        timestamp = capture.timestamp
        refers_date = rec_headers.get_header("WARC-Refers-To-Date")
        if refers_date:
            try:
                timestamp = iso_date_to_timestamp(refers_date)
            except ValueError:
                logger.warning("revisit %s: bad WARC-Refers-To-Date %r", capture.url, refers_date)
        failures: dict[str, str] = {}
        candidates = ctx.find_original(url, timestamp, digest)
        try:
            async for original in candidates:
                offset = original.offset
                if offset is None or not self.accepts(original):
                    continue
                if original.filename == capture.filename and offset == capture.offset:
                    continue
                name = f"{original.filename}:{offset}"
                try:
                    opened = await self._open(original.filename, offset, original.length)
                except LoadError as exc:
                    failures[name] = exc.message
                    continue
                if opened.rec_type == "revisit":
                    opened.close()
                    failures[name] = "is itself a revisit record"
                    continue
                return opened
        except LoadError:
            raise
        except GatewayError as exc:
            raise RevisitUnresolved(
                f"revisit {capture.url} {capture.timestamp}: looking up its original "
                f"{url} failed: {exc.message}",
                {**failures, **exc.errors},
            ) from exc
        finally:
            aclose = getattr(candidates, "aclose", None)
            if aclose is not None:
                await aclose()
        tried = f"; tried {'; '.join(f'{k}: {v}' for k, v in failures.items())}" if failures else ""
        raise RevisitUnresolved(
            f"original for revisit {capture.url} {capture.timestamp} could not be loaded: "
            f"no capture of {url} near {timestamp} with digest {digest or '-'}{tried}",
            failures,
        )

    # -------------------------------------------------------------- assembly
    def _assemble(
        self, capture: CdxRecord, head: OpenedRecord, payload: OpenedRecord, ctx: LoadContext
    ) -> LoadedRecord:
        record = payload.record
        warc_headers = record.rec_headers
        http_bytes = b""
        if payload.rec_type in _HTTP_RECORD_TYPES:
            http = head.record.http_headers or record.http_headers
            status = capture.status
            replayed = http and payload.rec_type != "request" and not ctx.as_stored
            if replayed and not status.startswith(("2", "4", "5")):
                location = http.get_header("Location")
                if is_self_redirect(ctx.request_url, capture, http.get_statuscode(), location):
                    raise SelfRedirect(
                        f"capture {capture.url} {capture.timestamp} redirects to itself "
                        f"(Location: {location}); skipped to avoid a redirect loop",
                        {f"{capture.url} {capture.timestamp}": "self-redirect"},
                    )
            if http:
                http_bytes = block_bytes(http)
            consumed = payload.http_consumed
            if consumed and len(http_bytes) != consumed:
                _adjust_content_length(warc_headers, len(http_bytes) - consumed)
                warc_headers.remove_header("WARC-Block-Digest")
        if payload is not head:
            # The block served is the revisit's HTTP headers over the original's
            # payload: the original's block digest does not fit it (warcio check
            # fails it), and recomputing it would read the payload before the
            # headers go out. Left out; WARC-Payload-Digest still holds.
            warc_headers.remove_header("WARC-Block-Digest")
            head_headers = head.record.rec_headers
            warc_headers.replace_header(
                "WARC-Refers-To-Target-URI", warc_headers.get_header("WARC-Target-URI") or ""
            )
            warc_headers.replace_header(
                "WARC-Refers-To-Date", warc_headers.get_header("WARC-Date") or ""
            )
            warc_headers.replace_header(
                "WARC-Target-URI", head_headers.get_header("WARC-Target-URI") or capture.url
            )
            warc_headers.replace_header(
                "WARC-Date",
                head_headers.get_header("WARC-Date") or timestamp_to_iso_date(capture.timestamp),
            )
            head.close()
        warc_bytes = block_bytes(warc_headers)
        remaining = payload.remaining
        stored_gzip = None
        member = payload.member
        if member is not None and payload is head:
            stored = payload.stored_head
            size = len(warc_bytes)
            if stored[:size] == warc_bytes and stored[size:] == http_bytes:
                stored_gzip = member  # served exactly as stored
        return LoadedRecord(
            capture=capture,
            warc_headers=warc_bytes,
            http_headers=http_bytes,
            body=payload.body,
            content_length=(
                None if remaining is None else len(warc_bytes) + len(http_bytes) + remaining
            ),
            target_uri=warc_headers.get_header("WARC-Target-URI") or capture.url,
            warc_date=(
                warc_headers.get_header("WARC-Date") or timestamp_to_iso_date(capture.timestamp)
            ),
            close=_closer(payload),
            stored_gzip=stored_gzip,
        )


def _closer(opened: OpenedRecord) -> Callable[[], Any]:
    async def close() -> None:
        opened.close()

    return close


def _adjust_content_length(warc_headers: Any, difference: int) -> None:
    value = warc_headers.get_header("Content-Length")
    if not value:
        return
    # An unparsable value made warcio read the block as empty: nothing to adjust.
    with contextlib.suppress(ValueError):
        warc_headers.replace_header("Content-Length", str(int(value) + difference))


def is_self_redirect(
    request_url: str, capture: CdxRecord, status_code: str, location: str | None
) -> bool:
    """True for a 3xx (not 304) whose Location is the requested URL (pywb rules).

    Compared lowercased without scheme and trailing slash, a relative
    Location joined with the capture's host; or the Location's urlkey equals
    the capture's urlkey.

    >>> cap = CdxRecord.parse('org,iana)/ 20140127171238 {"url": "http://iana.org"}')
    >>> is_self_redirect("iana.org", cap, "302", "http://www.iana.org/")
    True
    >>> is_self_redirect("iana.org", cap, "301", "/about")
    False
    """
    if not status_code.startswith("3") or status_code == "304" or not location:
        return False
    target = location.lower()
    if target.startswith("/"):
        target = urlsplit(capture.url).netloc + target
    target = target.split("://", 1)[-1].rstrip("/")
    request = request_url.lower().split("://", 1)[-1].rstrip("/")
    if request == target:
        return True
    try:
        return canonical_urlkey(target) == capture.urlkey
    except ValueError:
        return False
