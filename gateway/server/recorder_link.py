"""Recording under ``gateway serve --workers N``: one worker records, the others forward to it.

The snapshot store has one writer (:meth:`gateway.store.Store.open`,
``mode="write"``), and the kernel gives a new connection to whichever
worker takes it first, so a request to record can reach any worker. With
``--workers N`` and a config that records (issue 15 §3):

- the supervisor makes a directory only its user can enter (``mkdtemp``,
  mode 0700; removed when it exits) and names a Unix socket in it;
- worker 0 is the *recorder*: it opens the store as its writer (recovery of
  what a killed writer left open included) and serves the same app on that
  socket too (:func:`gateway.server.http_server.run_app`, ``unix_path``), after
  removing a socket its killed predecessor left;
- the other workers open the store shared, serve every collection that does
  not record themselves (``$store`` lookups and record loads included), and
  forward each request for a collection that records (``/{coll}/...``: its
  method, target, headers and body, as they came: a direct POST's headers
  are what the live fetch sends and records) to the recorder over the
  socket, then stream its answer back as it comes, bytes unchanged (no
  decompression), with ``Via: 1.1 gateway-worker-<n>`` added to it (RFC
  9110 §7.6.3);
- while the recorder is not there (restarting after a crash, or still
  opening the store), a forwarded request is answered 503 with a JSON
  message and ``Retry-After: 1``; an answer cut by the recorder's death
  after it started closes the client's connection (a short body, never one
  that looks whole), as the resource route does for a record that fails.

A forwarded request costs one more local hop (a Unix socket, no TLS, no
DNS) for the recording collections only; the others are served where they
arrive. The supervisor (:mod:`gateway.server.workers`) replaces a dead recorder
like any worker.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Final

import aiohttp
from aiohttp import web
from yarl import URL

from gateway.loaders.warc_build import HOP_BY_HOP

__all__ = [
    "NOT_FORWARDED",
    "RECORDER_SESSION",
    "RecorderLink",
    "forwarding",
    "remove_stale_socket",
]

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The session a forwarding worker talks to the recorder with.
RECORDER_SESSION: Final = web.AppKey("recorder_session", aiohttp.ClientSession)

#: Headers that belong to one connection (RFC 9110 §7.6.1), and ``Host``,
#: which the forwarding hop sets itself: never copied across it.
NOT_FORWARDED: Final = HOP_BY_HOP | {"host"}

#: Seconds to wait for the recorder's socket to accept (it is local: a
#: recorder that does not accept at once is not there).
_CONNECT_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class RecorderLink:
    """Where this worker stands: ``worker`` (0 .. N-1), and the recorder's socket path.

    Worker 0 is the recorder (:attr:`records`); the others forward.
    """

    socket_path: str
    worker: int

    @property
    def records(self) -> bool:
        """True in the worker that holds the store's writer."""
        return self.worker == 0


def remove_stale_socket(path: str) -> None:
    """Remove a socket a killed recorder left at ``path`` (nothing else is ever there)."""
    with suppress(FileNotFoundError):
        os.unlink(path)


def forwarding(
    app: web.Application, link: RecorderLink, recording: frozenset[str]
) -> Callable[[Handler], Handler]:
    """A wrapper for ``/{coll}/...`` handlers sending ``recording`` collections to the recorder.

    Registers the forwarding session on ``app`` (opened at start-up, closed
    at cleanup). See the module docstring for what is forwarded and how.
    """

    async def session(app: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.UnixConnector(path=link.socket_path)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=_CONNECT_S)
        app[RECORDER_SESSION] = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        )
        try:
            yield
        finally:
            await app[RECORDER_SESSION].close()

    app.cleanup_ctx.append(session)
    by = f"gateway-worker-{link.worker}"

    def wrap(handler: Handler) -> Handler:
        async def route(request: web.Request) -> web.StreamResponse:
            if request.match_info.get("coll") in recording:
                return await _forward(request, request.app[RECORDER_SESSION], by)
            return await handler(request)

        return route

    return wrap


async def _forward(
    request: web.Request, session: aiohttp.ClientSession, by: str
) -> web.StreamResponse:
    """Send ``request`` to the recorder and stream its answer back (module docstring).

    ``by``: this worker's name, in the answer's ``Via``. The request goes
    without one: a direct POST's headers are what the live fetch sends and
    records, and they must be the client's, as with one process.
    """
    body = await request.read() if request.body_exists else None  # bounded: client_max_size
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in NOT_FORWARDED]
    headers.append(("Host", request.host))
    target = URL(f"http://recorder{request.raw_path}", encoded=True)
    try:
        upstream = await session.request(
            request.method, target, headers=headers, data=body, allow_redirects=False
        )
    except (aiohttp.ClientConnectionError, OSError) as exc:
        logger.warning("the recording worker cannot be reached: %s", exc)
        return web.json_response(
            {
                "message": "the worker that records is not running (it is being started "
                "or replaced); retry",
                "errors": {"recorder": str(exc) or type(exc).__name__},
            },
            status=503,
            headers={"Retry-After": "1"},
        )
    async with upstream:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in upstream.headers.items():
            if name.lower() not in NOT_FORWARDED:
                response.headers.add(name, value)
        response.headers.add("Via", f"1.1 {by}")
        await response.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            logger.error(
                "%s %s: the recording worker's answer broke off, closing the connection: %s",
                request.method,
                request.path,
                exc,
            )
            if request.transport is not None:
                request.transport.close()
            return response
        await response.write_eof()
    return response
