"""aiohttp's HTTP server, with raw bytes past ASCII in request targets read as percent-encoded.

Browsers percent-encode a URL before sending it, but curl, wget and many
scripts send what they were given: ``GET /web/index?url=münchen.de/``
arrives as raw UTF-8 bytes. RFC 9112 §3.2 does not allow them in a request
target, and aiohttp's C parser (llhttp, which has no lenient mode for the
target) answers such a request itself with a plain-text 400, while its
pure-Python parser accepts it. The gateway keeps the C parser, for its
speed, and reads such a request as the client meant it:

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
its log line short). The parser swap relies on aiohttp's
``RequestHandler._parser`` and ``SockSite``'s attributes (aiohttp 3.9 to
3.14); ``tests/test_http_server.py`` fails if they change.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, Final

from aiohttp import web
from aiohttp.http_exceptions import InvalidURLError
from aiohttp.http_parser import HttpRequestParser, RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler, RequestPayloadError

__all__ = [
    "GatewayRequestHandler",
    "GatewaySockSite",
    "TargetEncodingParser",
    "percent_encode_past_ascii",
    "run_app",
]

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


class TargetEncodingParser:
    """aiohttp's request parser, re-reading a request line with raw bytes past ASCII.

    ``parser`` is aiohttp's (C) request parser, whose methods are delegated
    to; ``new_parser`` makes another, for a line re-read. The bytes of a
    request line not yet complete are kept (up to :data:`MAX_HEAD_BYTES`),
    so that a line refused in a later read is re-read whole.
    """

    __slots__ = ("_head", "_new_parser", "_parser", "_payload")

    def __init__(
        self, parser: HttpRequestParser, new_parser: Callable[[], HttpRequestParser]
    ) -> None:
        self._parser = parser
        self._new_parser = new_parser
        # Bytes of the message being started, since the last message's head
        # ended; None once its request line is complete (nothing to re-read).
        self._head: bytes | None = b""
        # The last message's body: until it ends, what comes is body, not head.
        self._payload: StreamReader | None = None

    def feed_data(self, data: bytes) -> FeedResult:
        """Parse ``data``: ``(messages, upgraded, tail)`` as aiohttp's parser returns them.

        Raises aiohttp's ``HttpProcessingError`` for what stays malformed.
        """
        payload = self._payload
        between = payload is None or payload.is_eof()
        try:
            result = self._parser.feed_data(data)
        except InvalidURLError as exc:
            return self._reread(data, exc)
        messages = result[0]
        if messages:
            self._head = b""
            self._payload = messages[-1][1]
        elif between and self._head is not None:
            head = self._head + data
            self._head = None if b"\n" in head or len(head) > MAX_HEAD_BYTES else head
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
    """aiohttp's ``RequestHandler`` (one connection's protocol), with :class:`TargetEncodingParser`.

    Takes ``RequestHandler``'s arguments; its parser is made as
    ``RequestHandler`` makes its own.
    """

    def __init__(self, manager: web.Server, *, loop: asyncio.AbstractEventLoop, **kwargs: Any):
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
        self._parser = TargetEncodingParser(parser, new_parser)  # type: ignore[assignment]


class GatewaySockSite(web.SockSite):
    """``aiohttp.web.SockSite`` whose connections are :class:`GatewayRequestHandler`.

    ``handler_kwargs``: the ``RequestHandler`` arguments the runner was
    given (``access_log``, ``access_log_format``...).
    """

    __slots__ = ("_handler_kwargs",)

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, **handler_kwargs: Any):
        super().__init__(runner, sock)
        self._handler_kwargs = handler_kwargs

    async def start(self) -> None:
        # BaseSite.start registers the site; SockSite.start would serve aiohttp's handler.
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        kwargs = self._handler_kwargs

        def protocol() -> GatewayRequestHandler:
            return GatewayRequestHandler(server, loop=loop, **kwargs)

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
    **handler_kwargs: Any,
) -> None:
    """Serve ``app`` on ``sock`` until SIGINT or SIGTERM, as ``aiohttp.web.run_app`` does.

    The same life cycle (startup and cleanup signals, graceful shutdown of
    open connections, remaining tasks cancelled, ``loop`` closed), with
    connections handled by :class:`GatewayRequestHandler`.
    ``handler_kwargs`` go to every ``RequestHandler``. ``unix_path``: also
    serve the app on a Unix socket there, made once the app has started
    (the recorder of ``--workers``: :mod:`gateway.server.recorder_link`).
    """

    async def serve() -> None:
        runner = web.AppRunner(
            app, handle_signals=True, handler_cancellation=handler_cancellation, **handler_kwargs
        )
        await runner.setup()
        try:
            await GatewaySockSite(runner, sock, **handler_kwargs).start()
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
