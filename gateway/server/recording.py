"""Recording: captures served by a ``record: true`` step or member go into the store.

:meth:`Recorder.wrap` tees the payload of a served record into a spooled
temporary file while it streams to the client; once the last byte has been
read the capture is handed to the store's single writer task
(:meth:`gateway.store.Store.submit`), which a client disconnect cannot cancel
half-way, and the client is not kept waiting for the acknowledgement. A
stream that does not complete (the client went away, the upstream broke) is
not recorded: the store never holds a truncated capture.

Only captures fetched from a remote archive or the live web (they carry a
``load_url``) are recorded; records read from local WARC files already are
archived.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from io import BytesIO
from typing import IO, Final

from warcio.statusandheaders import StatusAndHeadersParser

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.memento import iso_to_timestamp
from gateway.clients import SharedClients
from gateway.loaders.base import LoadContext, LoadedRecord, ResourceLoader, WrappedRequest
from gateway.loaders.live import LiveLoadedRecord
from gateway.sources.store import StoreSource
from gateway.store import (
    CaptureAck,
    CaptureInput,
    HttpRequest,
    HttpResponse,
    StoreError,
    StoreWriteError,
)
from gateway.store.settings import DedupPolicy

__all__ = ["Recorder"]

logger = logging.getLogger(__name__)

#: Payload bytes kept in memory before the tee spills to a temporary file.
SPOOL_MEMORY_BYTES: Final = 1024 * 1024
#: Name under which captures served back from the store are tagged.
STORE_MEMBER: Final = "store"


class Recorder:
    """Records the captures of one step into ``clients.store``.

    ``members`` names the members whose captures are recorded (all of the
    step's members for a step-level ``record: true``).
    """

    def __init__(
        self,
        *,
        clients: SharedClients,
        members: frozenset[str],
        dedup: DedupPolicy | None,
        skip_if_updated_days: float | None,
    ) -> None:
        self.clients = clients
        self.members = members
        self.dedup = dedup
        self.skip_if_updated_days = skip_if_updated_days
        #: Hand-overs to the store still running (the store's queue may be full).
        self._pending: set[asyncio.Task[asyncio.Future[CaptureAck] | None]] = set()
        self._store_source = StoreSource(
            name=STORE_MEMBER, store=lambda: clients.store, clients=clients
        )

    def wants(self, capture: CdxRecord) -> bool:
        """True for a remote or live capture of a recording member."""
        return "load_url" in capture.fields and capture.fields.get("source-coll") in self.members

    async def recent(self, url: str, ctx: LoadContext) -> LoadedRecord | None:
        """The store's capture of ``url`` newer than ``skip_if_updated_days``, loaded.

        None when there is none (or no store): the step then fetches as usual.
        """
        store = self.clients.store
        if store is None or self.skip_if_updated_days is None:
            return None
        capture = await store.recent_capture(url, max_age_days=self.skip_if_updated_days)
        if capture is None:
            return None
        capture.set_source(STORE_MEMBER, STORE_MEMBER)
        loader: ResourceLoader = self._store_source.resource_loaders()[0]
        return await loader.load(capture, ctx)

    def wrap(self, loaded: LoadedRecord, request: WrappedRequest) -> LoadedRecord:
        """A LoadedRecord streaming the same bytes that records them once complete."""
        store = self.clients.store
        if store is None:
            logger.warning(
                "recording step without an open store; not recording %s", loaded.target_uri
            )
            return loaded
        source = loaded.body

        durable = store.settings.durable_ack

        async def tee() -> AsyncIterator[bytes]:
            # Created on first read (a HEAD never reads the body); closed here
            # unless handed over to the store, which then owns and closes it.
            spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115
            complete = False
            held = b""  # with durable_ack, the last chunk waits for the store
            try:
                async for chunk in source:
                    spool.write(chunk)
                    if durable:
                        if held:
                            yield held
                        held = chunk
                    else:
                        yield chunk
                complete = True
            finally:
                if complete:
                    handed = self._hand_over(loaded, request, spool)
                else:
                    spool.close()
            if durable:
                await _stored(handed, loaded.target_uri)
                if held:
                    yield held

        loaded.body = tee()
        return loaded

    def _hand_over(
        self, loaded: LoadedRecord, request: WrappedRequest, spool: IO[bytes]
    ) -> asyncio.Task[asyncio.Future[CaptureAck] | None]:
        """Submit in a task of its own: a cancelled handler (the client went away)
        never cancels it while the store's queue is full. Returns the task, whose
        result is the capture's acknowledgement future (None: not recorded)."""
        task = asyncio.get_running_loop().create_task(self._submit(loaded, request, spool))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return task

    async def aclose(self) -> None:
        """Wait for hand-overs still running (before the store closes)."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def _submit(
        self, loaded: LoadedRecord, request: WrappedRequest, spool: IO[bytes]
    ) -> asyncio.Future[CaptureAck] | None:
        store = self.clients.store
        if store is None:
            spool.close()
            return None
        try:
            response = HttpResponse.from_header_block(loaded.http_headers)
        except ValueError as exc:
            logger.warning("not recording %s: %s", loaded.target_uri, exc)
            spool.close()
            return None
        spool.seek(0)
        capture = CaptureInput(
            url=loaded.target_uri,
            response=response,
            payload=spool,
            request=_request_sent(loaded, request),
            warc_date=_capture_time(loaded),
            dedup=self.dedup,
        )
        try:
            future = await store.submit(capture)
        except StoreError as exc:  # closed or failing: the served answer stands
            logger.warning("not recording %s: %s", loaded.target_uri, exc)
            return None
        future.add_done_callback(_log_failure)
        return future


async def _stored(handed: asyncio.Task[asyncio.Future[CaptureAck] | None], url: str) -> None:
    """Wait until the capture handed over is durable in the store (``durable_ack``).

    Shielded: a client that leaves does not cancel the write. Raises
    :class:`StoreWriteError` when it was not stored, so that the response is
    cut short before its last bytes: a complete answer means stored.
    """
    future = await asyncio.shield(handed)
    if future is None:
        raise StoreWriteError(f"{url}: not stored; the answer is cut short (durable_ack)")
    try:
        await asyncio.shield(future)
    except StoreError as exc:
        raise StoreWriteError(f"{url}: not stored ({exc}); the answer is cut short") from exc


def _request_sent(loaded: LoadedRecord, wrapped: WrappedRequest) -> HttpRequest:
    """The request that fetched ``loaded``: the live loader's own request record
    when there is one (what aiohttp really sent), else the client's wrapped one."""
    sent = loaded.request if isinstance(loaded, LiveLoadedRecord) else None
    if sent is not None:
        # warcio puts the method in ``protocol`` and "target version" in ``statusline``
        parsed = StatusAndHeadersParser([], verify=False).parse(BytesIO(sent.http_headers))
        target, _, version = str(parsed.statusline).rpartition(" ")
        return HttpRequest(
            method=str(parsed.protocol) or wrapped.method,
            target=target or None,
            headers=tuple((str(k), str(v)) for k, v in parsed.headers),
            body=sent.body,
            version=version or "HTTP/1.1",
        )
    return HttpRequest(method=wrapped.method, headers=tuple(wrapped.headers), body=wrapped.body)


def _capture_time(loaded: LoadedRecord) -> datetime:
    """The capture's time: its WARC-Date, else its index timestamp (UTC)."""
    try:
        ts = iso_to_timestamp(loaded.warc_date)
    except ValueError:
        ts = loaded.capture.timestamp
    return datetime.strptime(ts[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)


def _log_failure(future: asyncio.Future[CaptureAck]) -> None:
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        logger.warning("recording failed: %s", exc)
