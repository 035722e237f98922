"""The ResourceLoader protocol: one capture in, one WARC record out.

A loader turns a :class:`~gateway.cdx.cdxj.CdxRecord` into a
:class:`LoadedRecord`: the WARC header block and HTTP header block held in
memory, the rest of the block as a bounded async stream of bytes. The
Resource API writes ``warc_headers + http_headers + body`` to the client as
``application/warc-record`` (pywb warcserver: the record without its trailing
``CRLF CRLF``).

A loader that does not apply to a capture (no ``filename`` for a WARC
loader, no ``load_url`` for a remote loader) says so with :meth:`accepts`;
one that applies but fails raises a :class:`~gateway.errors.LoadError`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, Self, runtime_checkable

from gateway.cdx.cdxj import CdxRecord
from gateway.clients import SharedClients

__all__ = [
    "FindOriginal",
    "LoadContext",
    "LoadedRecord",
    "LoaderConfig",
    "LoaderFactory",
    "ResourceLoader",
    "StoredGzip",
    "WrappedRequest",
]

#: ``find_original(url, timestamp, digest)`` yields non-revisit captures of
#: ``url`` with payload ``digest``, closest to ``timestamp`` first.
FindOriginal = Callable[[str, str, str], AsyncIterator[CdxRecord]]


class StoredGzip(Protocol):
    """A record's gzip member exactly as stored (WARC 1.1 Annex D), sent as it is.

    ``length`` is its size in bytes; ``whole`` the member when it is in
    memory already, else None; iterating yields its bytes in order. Sent
    with ``Content-Encoding: gzip``, it decodes to the record followed by
    its ``CRLF CRLF`` trailer.
    """

    length: int
    whole: bytes | None

    def __aiter__(self) -> AsyncIterator[bytes]: ...


@dataclass(slots=True, kw_only=True)
class LoadedRecord:
    """One WARC record ready to stream.

    ``content_length`` is the byte count of
    ``warc_headers + http_headers + body`` when known (the HTTP
    ``Content-Length`` of the Resource API answer), else None.
    ``close`` releases the file or connection behind ``body``; the API always
    calls it, also when the client goes away. A ``body`` iterator that holds
    all of its bytes in memory already may say so (see :meth:`body_in_memory`).
    ``stored_gzip`` is set when the record is served exactly as stored and
    was stored as its own gzip member (asked for with
    :attr:`LoadContext.gzip_member`): the API may then send that member
    instead of ``warc_headers + http_headers + body`` (one or the other is
    read, never both).
    """

    capture: CdxRecord
    warc_headers: bytes
    http_headers: bytes
    body: AsyncIterator[bytes]
    content_length: int | None
    target_uri: str
    #: WARC-Date of the served record (ISO 8601, as in the record).
    warc_date: str
    close: Callable[[], Awaitable[None]] | None = None
    stored_gzip: StoredGzip | None = None

    def body_in_memory(self) -> bytes | memoryview | None:
        """Everything ``body`` would yield, joined, if it is in memory already.

        That is the ``whole`` attribute of the body iterator when it has one
        that is not None (a :class:`~gateway.loaders.warc_stream.RecordBody`
        of a record read and inflated at once: a view of the inflated bytes,
        not a copy), else None: the body streams. The Resource API then sends
        the answer in one piece without iterating ``body``. A wrapper that
        replaces ``body`` (the recorder's tee) has no ``whole``, so what it
        yields is what gets sent.
        """
        whole = getattr(self.body, "whole", None)
        return whole if isinstance(whole, (bytes, memoryview)) else None

    async def aclose(self) -> None:
        if self.close is not None:
            close, self.close = self.close, None
            await close()


@dataclass(frozen=True, slots=True, kw_only=True)
class WrappedRequest:
    """The HTTP request a live or remote fetch sends upstream (resource-post).

    ``headers`` keep their order and case; hop-by-hop headers included.
    """

    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


@dataclass(slots=True, kw_only=True)
class LoadContext:
    """What a loader may need beyond the capture.

    ``request_url`` is the URL the client asked for (self-redirect check);
    ``find_original`` looks up a revisit's original through the same
    collection step; ``request`` is the client's wrapped request, if any.
    ``gzip_member``: the client takes a gzip-encoded answer, so a loader
    that can should offer a record's stored gzip member
    (:attr:`LoadedRecord.stored_gzip`) rather than inflate it.
    ``as_stored``: the record as archived, for a copy of the archive (the
    WACZ export, :mod:`gateway.index.export`) rather than for replay: a
    revisit is not resolved to its original (WARC 1.1 §6.7; the exporter
    copies the original beside it) and a redirect to its own URL is not
    refused. Loaders that get records already resolved from elsewhere (a
    remote archive, the live web) give what they get.
    """

    request_url: str
    find_original: FindOriginal
    request: WrappedRequest = field(default_factory=WrappedRequest)
    extra_headers: Mapping[str, str] = field(default_factory=dict)
    gzip_member: bool = False
    as_stored: bool = False


class LoaderConfig(Protocol):
    """A frozen, slotted, keyword-only dataclass holding one loader's settings."""

    @classmethod
    def from_shorthand(cls, text: str) -> Self: ...


@runtime_checkable
class ResourceLoader(Protocol):
    """Loads WARC records for captures (pywb warcserver ``BaseLoader``)."""

    def accepts(self, capture: CdxRecord) -> bool:
        """True when this loader knows how to load ``capture`` at all."""
        ...

    async def load(self, capture: CdxRecord, ctx: LoadContext) -> LoadedRecord:
        """Load the record; raises :class:`~gateway.errors.LoadError` on failure."""
        ...

    def describe(self) -> str:
        """One line for ``gateway check-config``."""
        ...


class LoaderFactory(Protocol):
    """What LOADER_TYPES maps a type name to."""

    config_type: ClassVar[type[LoaderConfig]]
    shorthand_prefixes: ClassVar[tuple[str, ...]]

    @classmethod
    def from_config(cls, config: LoaderConfig, *, clients: SharedClients) -> ResourceLoader: ...
