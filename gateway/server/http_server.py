"""aiohttp's HTTP server: connection limits, and raw UTF-8 in request targets.

**Connection limits** (:mod:`gateway.server.connection_limits`: a client
must not hold a connection, nor the file descriptor behind it, as long as it
likes): :class:`GatewayRequestHandler` closes a connection idle past the
keep-alive timeout, answers ``408`` to a head not whole within the head
timeout of its first byte or a body stopped for the body timeout, and
counts itself in the cap's :class:`~gateway.server.connection_limits.ConnectionSlots`,
which :class:`GatewaySockSite` asks for each accepted connection's protocol.
The parser tells the connection of heads and bodies that take more than
one read (:class:`ReadWatcher`): a request whose head and body arrive in
one read (a GET, a small POST) arms no timer and costs an identity test
(one-URL index lookup, 299.3k instructions per request before, 299.8k
after, within the runs' noise; callgrind, ``bench.bench_instructions``); a
read that leaves a head or a body incomplete arms one timer per
connection, moved lazily as reads come.

**Raw UTF-8 in request targets.** Browsers percent-encode a URL before
sending it, but curl, wget and many scripts send what they were given:
``GET /web/index?url=münchen.de/`` arrives as raw UTF-8 bytes. RFC 9112
§3.2 does not allow them in a request target, and aiohttp's C parser
(llhttp, which has no lenient mode for the target) answers such a request
itself with a plain-text 400, while its pure-Python parser accepts it. The
gateway keeps the C parser, for its speed, and reads such a request as the
client meant it:

- :class:`TargetEncodingParser` feeds every byte to aiohttp's C parser.
  When the parser refuses a request target (``InvalidURLError``) whose
  request line holds bytes past ASCII, the line is rewritten with each of
  those bytes percent-encoded (``ü``, ``C3 BC``, becomes ``%C3%BC``) and the
  message so far is fed to a fresh parser. The app then sees
  ``/web/index?url=m%C3%BCnchen.de/``, as if the client had encoded it.
  Nothing else of the request changes; headers and bodies with such bytes
  are untouched (the C parser takes them as they are).
- :class:`GatewayRequestHandler` is aiohttp's ``RequestHandler`` with that
  parser, :class:`GatewaySockSite` serves a socket with it, and
  :func:`run_app` is ``aiohttp.web.run_app`` for one listening socket with
  that site (``gateway serve`` runs it).

Cost for every other request: one Python call and a few attribute reads
and writes around the C parser's ``feed_data`` (measured with callgrind, see the
README's *Hardening*). What stays aiohttp's answer: a byte past ASCII in a
request that follows another in one read (HTTP pipelining, which browsers
do not use) ends the connection with aiohttp's plain-text 400, as before;
so does every other malformed request line (:mod:`gateway.server.logfilter` makes
its log line short).

Both rely on aiohttp's internals (aiohttp 3.14): ``RequestHandler``'s
``_parser``, its waiter for the next request, its keep-alive timer and
flags (``tests/test_slow_clients.py`` lists them), and ``SockSite``'s
attributes; ``tests/test_http_server.py`` and
``tests/test_slow_clients.py`` fail if they change.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, Final, Protocol

from aiohttp import web
from aiohttp.http_exceptions import InvalidURLError
from aiohttp.http_parser import HttpRequestParser, RawRequestMessage
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

from gateway.server.connection_limits import (
    DEFAULT_LIMITS,
    ConnectionLimits,
    ConnectionSlots,
    busy_answer,
    probes_only_handler,
    raw_answer,
)

__all__ = [
    "GatewayRequestHandler",
    "GatewaySockSite",
    "ReadWatcher",
    "TargetEncodingParser",
    "percent_encode_past_ascii",
    "run_app",
]

logger = logging.getLogger(__name__)

#: The longest partial request line kept to be re-read (aiohttp's default
#: ``max_line_size`` is 8190; a longer line is refused by the parser anyway).
MAX_HEAD_BYTES: Final = 64 * 1024

_PAST_ASCII: Final = re.compile(rb"[\x80-\xff]")

FeedResult = tuple[Sequence[tuple[RawRequestMessage, StreamReader]], bool, bytes]


def percent_encode_past_ascii(line: bytes) -> bytes:
    """``line`` with each byte past ASCII as ``%XX`` (upper-case hex, RFC 3986 §2.1).

    >>> percent_encode_past_ascii("GET /?url=münchen.de/ HTTP/1.1".encode())
    b'GET /?url=m%C3%BCnchen.de/ HTTP/1.1'
    >>> percent_encode_past_ascii(b"GET /%C3%BC HTTP/1.1")
    b'GET /%C3%BC HTTP/1.1'
    """
    return _PAST_ASCII.sub(lambda m: b"%%%02X" % m[0][0], line)


class ReadWatcher(Protocol):
    """What :class:`TargetEncodingParser` tells of the reads it parses (the connection's timers)."""

    def head_started(self) -> None:
        """The first byte of a request head came (not a blank line)."""

    def head_done(self) -> None:
        """The head :meth:`head_started` announced is whole."""

    def body_read(self, payload: StreamReader) -> None:
        """A read of ``payload``, a request body that was not whole (it may be now)."""


class TargetEncodingParser:
    """aiohttp's request parser, re-reading a request line with raw bytes past ASCII.

    ``parser`` is aiohttp's (C) request parser, whose methods are delegated
    to; ``new_parser`` makes another, for a line re-read. The bytes of a
    request line not yet complete are kept (up to :data:`MAX_HEAD_BYTES`),
    so that a line refused in a later read is re-read whole. ``watcher``,
    when given, hears of heads and bodies that take more than one read
    (:class:`ReadWatcher`); a request that comes in one read costs it an
    identity test.
    """

    __slots__ = ("_head", "_head_watched", "_new_parser", "_parser", "_payload", "_watcher")

    def __init__(
        self,
        parser: HttpRequestParser,
        new_parser: Callable[[], HttpRequestParser],
        watcher: ReadWatcher | None = None,
    ) -> None:
        self._parser = parser
        self._new_parser = new_parser
        self._watcher = watcher
        # Bytes of the message being started, since the last message's head
        # ended; None once its request line is complete (nothing to re-read).
        self._head: bytes | None = b""
        # Whether the watcher heard head_started() and not yet head_done().
        self._head_watched = False
        # The last message's body: until it ends, what comes is body, not head.
        self._payload: StreamReader | None = None

    def feed_data(self, data: bytes) -> FeedResult:
        """Parse ``data``: ``(messages, upgraded, tail)`` as aiohttp's parser returns them.

        Raises aiohttp's ``HttpProcessingError`` for what stays malformed.
        """
        payload = self._payload
        # (EMPTY_PAYLOAD, a GET's, first: one Python call fewer per request.)
        between = payload is None or payload is EMPTY_PAYLOAD or payload.is_eof()
        try:
            result = self._parser.feed_data(data)
        except InvalidURLError as exc:
            return self._reread(data, exc)
        messages = result[0]
        watcher = self._watcher
        if messages:
            self._head = b""
            last = self._payload = messages[-1][1]
            if watcher is not None:
                if self._head_watched:
                    self._head_watched = False
                    watcher.head_done()
                if last is not EMPTY_PAYLOAD and not last.is_eof():
                    watcher.body_read(last)
                elif not between:
                    assert payload is not None
                    watcher.body_read(payload)  # it ended in this read
        elif not between:
            assert payload is not None
            if watcher is not None:
                watcher.body_read(payload)
        else:
            if self._head is not None:
                head = self._head + data
                self._head = None if b"\n" in head or len(head) > MAX_HEAD_BYTES else head
            if watcher is not None and not self._head_watched and data.strip(b"\r\n"):
                self._head_watched = True
                watcher.head_started()
        return result

    def _reread(self, data: bytes, exc: InvalidURLError) -> FeedResult:
        """The messages of the refused line re-read percent-encoded, or ``exc`` raised."""
        if self._head is None:
            raise exc
        buffered = self._head + data
        start = len(buffered) - len(buffered.lstrip(b"\r\n"))
        end = buffered.find(b"\n", start)
        line = buffered[start:] if end < 0 else buffered[start:end]
        if line.isascii():
            raise exc  # a target malformed otherwise: aiohttp's 400
        self._parser = self._new_parser()
        self._head, self._payload = b"", None
        rest = b"" if end < 0 else buffered[end:]
        return self.feed_data(buffered[:start] + percent_encode_past_ascii(line) + rest)

    def feed_eof(self) -> Any:
        return self._parser.feed_eof()

    def message_consumed(self) -> None:
        self._parser.message_consumed()

    def pause_reading(self) -> None:
        self._parser.pause_reading()

    def set_upgraded(self, val: bool) -> None:
        self._parser.set_upgraded(val)


class GatewayRequestHandler(RequestHandler):
    """aiohttp's ``RequestHandler`` (one connection's protocol) with the gateway's limits.

    Its parser is a :class:`TargetEncodingParser`, made as ``RequestHandler``
    makes its own; ``limits`` bound the time a client takes (the module's
    docstring); ``slots``, when given, counts the connection
    (:class:`ConnectionSlots`); ``probes_only``: a connection past the cap,
    whose requests other than :data:`PROBE_PATHS` are answered 503. Takes
    ``RequestHandler``'s other arguments.
    """

    __slots__ = (
        "_body",
        "_body_since",
        "_body_start",
        "_head_since",
        "_limits",
        "_slots",
        "_stall_handle",
    )

    def __init__(
        self,
        manager: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        limits: ConnectionLimits = DEFAULT_LIMITS,
        slots: ConnectionSlots | None = None,
        probes_only: bool = False,
        **kwargs: Any,
    ):
        if probes_only:
            limits = limits.for_probes()
        kwargs["keepalive_timeout"] = limits.keepalive_timeout_s
        super().__init__(manager, loop=loop, **kwargs)
        auto_decompress = bool(kwargs.get("auto_decompress", True))

        def new_parser() -> HttpRequestParser:
            return HttpRequestParser(
                self,
                loop,
                self._read_bufsize,
                max_line_size=self.max_line_size,
                max_field_size=self.max_field_size,
                max_headers=self.max_headers,
                payload_exception=RequestPayloadError,
                auto_decompress=auto_decompress,
                max_msg_queue_size=self._max_msg_queue_size,
            )

        parser = self._parser
        assert isinstance(parser, HttpRequestParser)
        self._parser = TargetEncodingParser(parser, new_parser, self)  # type: ignore[assignment]
        self._limits = limits
        self._slots = slots
        # The loop time of the first byte of a request head not yet whole.
        self._head_since: float | None = None
        # The body arriving (not yet whole), and the loop time of its last read.
        self._body: StreamReader | None = None
        self._body_since = 0.0
        #: When the body arriving began (for the minimum body rate).
        self._body_start = 0.0
        self._stall_handle: asyncio.TimerHandle | None = None
        if probes_only and self._request_handler is not None:
            self._request_handler = probes_only_handler(self._request_handler, slots)

    # -- timing the client (the parser's ReadWatcher) ---------------------------

    def head_started(self) -> None:
        if self._force_close or self._close:
            return
        now = self._loop.time()
        self._head_since = now
        self._arm(now + self._limits.head_timeout_s)

    def head_done(self) -> None:
        self._head_since = None

    def body_read(self, payload: StreamReader) -> None:
        if payload.is_eof():
            self._body = None
            return
        now = self._loop.time()
        self._body_since = now  # b"" too: reading resumed, the client may send again
        if payload is not self._body:
            self._body = payload
            self._body_start = now
            self._arm(now + self._limits.body_timeout_s)

    def _arm(self, when: float) -> None:
        """Check the client at ``when`` (or earlier, when a check is already due before)."""
        handle = self._stall_handle
        if handle is not None:
            if handle.when() <= when:
                return  # it will re-arm itself for the later deadline
            handle.cancel()
        self._stall_handle = self._loop.call_at(when, self._check_stall)

    def _check_stall(self) -> None:
        self._stall_handle = None
        if self._force_close or self._close or self.transport is None:
            return
        now = self._loop.time()
        body = self._body
        if body is not None and body.is_eof():
            self._body = body = None
        if body is not None:
            limits = self._limits
            if self._reading_paused or self._buffer_paused:
                self._body_since = now  # the gateway holds the client back, not its stall
                self._body_start = now
            deadline = self._body_since + limits.body_timeout_s
            if now >= deadline:
                self._body_timed_out(body)
                return
            rate = limits.min_body_rate_bps
            if rate > 0:
                slow_at = self._body_start + limits.body_timeout_s + body.total_bytes / rate
                if now >= slow_at:
                    self._body_too_slow(body)
                    return
                deadline = min(deadline, slow_at)
            self._arm(deadline)
            return
        if self._head_since is None:
            return
        if not self._waiting():
            self._head_since = now  # queued behind a request still being answered
        deadline = self._head_since + self._limits.head_timeout_s
        if now < deadline:
            self._arm(deadline)
            return
        seconds = self._limits.head_timeout_s
        logger.debug(
            "closed the connection of %s: request head incomplete %g s after its first byte",
            self.peername,
            seconds,
        )
        message = f"the request head was not complete {seconds:g} s after its first byte"
        self._answer_and_close(raw_answer(408, "Request Timeout", message))

    def _body_timed_out(self, body: StreamReader) -> None:
        seconds = self._limits.body_timeout_s
        self._close_slow_body(body, f"the request body stopped: no byte for {seconds:g} s")

    def _body_too_slow(self, body: StreamReader) -> None:
        rate = self._limits.min_body_rate_bps
        self._close_slow_body(body, f"the request body came slower than {rate:g} bytes per second")

    def _close_slow_body(self, body: StreamReader, message: str) -> None:
        """Answer 408 with ``message`` if nothing was answered yet, else just close."""
        logger.debug("closed the connection of %s: %s", self.peername, message)
        request = self._current_request
        if request is not None and request.content is body and request.writer.output_size == 0:
            self._answer_and_close(raw_answer(408, "Request Timeout", message))
        else:
            self.force_close()  # an answer (or another request's) is under way: just close

    def _answer_and_close(self, answer: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(answer)
        self.force_close()

    def _waiting(self) -> bool:
        """Whether the connection waits for a request (idle, or receiving a head)."""
        waiter = self._waiter
        return waiter is not None and not waiter.done() and not self._force_close

    def waiting_since(self) -> float | None:
        """Loop time since which the connection waits for a request; ``None`` when busy."""
        if not self._waiting() or self.transport is None:
            return None
        return self._next_keepalive_close_time - self._keepalive_timeout

    def evict(self) -> None:
        """Close the connection to make room (it waits for a request: :meth:`waiting_since`).

        An idle connection is closed without a word (as when its keep-alive
        ends); one in the middle of a head gets a 503 first.
        """
        if self._head_since is not None:
            self._answer_and_close(busy_answer(self._slots))
        else:
            self.force_close()

    def _process_keepalive(self) -> None:
        if self._head_since is not None:
            # A head is arriving: the head timeout applies from its first byte, not this one.
            self._keepalive_handle = None
            return
        super()._process_keepalive()

    def connection_lost(self, exc: BaseException | None) -> None:
        handle = self._stall_handle
        if handle is not None:
            handle.cancel()
            self._stall_handle = None
        if self._slots is not None:
            self._slots.discard(self)
        super().connection_lost(exc)


class GatewaySockSite(web.SockSite):
    """``aiohttp.web.SockSite`` whose connections are :class:`GatewayRequestHandler`.

    ``limits``: the connections' :class:`ConnectionLimits` (the cap is
    counted per site); ``handler_kwargs``: the ``RequestHandler`` arguments
    the runner was given (``access_log``, ``access_log_format``...).
    """

    __slots__ = ("_handler_kwargs", "_limits", "connections")

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: socket.socket,
        *,
        limits: ConnectionLimits = DEFAULT_LIMITS,
        **handler_kwargs: Any,
    ):
        super().__init__(runner, sock)
        self._handler_kwargs = handler_kwargs
        self._limits = limits
        self.connections = ConnectionSlots(limits.max_connections)

    async def start(self) -> None:
        # BaseSite.start registers the site; SockSite.start would serve aiohttp's handler.
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        kwargs = self._handler_kwargs
        limits = self._limits
        slots = self.connections

        def make(probes_only: bool) -> GatewayRequestHandler:
            return GatewayRequestHandler(
                server, loop=loop, limits=limits, slots=slots, probes_only=probes_only, **kwargs
            )

        def protocol() -> asyncio.Protocol:
            return slots.protocol(make)

        self._server = await loop.create_server(
            protocol, sock=self._sock, ssl=self._ssl_context, backlog=self._backlog
        )


def run_app(
    app: web.Application,
    *,
    sock: socket.socket,
    loop: asyncio.AbstractEventLoop,
    handler_cancellation: bool = False,
    unix_path: str | None = None,
    limits: ConnectionLimits = DEFAULT_LIMITS,
    **handler_kwargs: Any,
) -> None:
    """Serve ``app`` on ``sock`` until SIGINT or SIGTERM, as ``aiohttp.web.run_app`` does.

    The same life cycle (startup and cleanup signals, graceful shutdown of
    open connections, remaining tasks cancelled, ``loop`` closed), with
    connections handled by :class:`GatewayRequestHandler` under ``limits``.
    ``handler_kwargs`` go to every ``RequestHandler``. ``unix_path``: also
    serve the app on a Unix socket there, made once the app has started
    (the recorder of ``--workers``: :mod:`gateway.server.recorder_link`;
    aiohttp's handler and limits, a local peer).
    """

    async def serve() -> None:
        runner = web.AppRunner(
            app, handle_signals=True, handler_cancellation=handler_cancellation, **handler_kwargs
        )
        await runner.setup()
        try:
            await GatewaySockSite(runner, sock, limits=limits, **handler_kwargs).start()
            if unix_path is not None:
                from gateway.server.recorder_link import remove_stale_socket

                remove_stale_socket(unix_path)
                await web.UnixSite(runner, unix_path).start()
            await asyncio.Event().wait()  # until a signal raises GracefulExit
        finally:
            await runner.cleanup()

    asyncio.set_event_loop(loop)
    main_task = loop.create_task(serve())
    try:
        loop.run_until_complete(main_task)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        try:
            if not main_task.done():
                main_task.cancel()
                with suppress(asyncio.CancelledError):
                    loop.run_until_complete(main_task)
        finally:
            _cancel_remaining(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


def _cancel_remaining(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
