"""A real aiohttp server playing a remote archive's raw (``id_``) replay endpoint.

:func:`replay_archive_app` answers ``/web/{timestamp}{mod}/{url}`` according
to the original URL's host, each host one behaviour a remote archive shows:

``archived.example``  a memento as pywb and Wayback send it: archived headers
                      as ``X-Archive-Orig-*`` (including the archived
                      ``Transfer-Encoding: chunked``), the archive's own
                      ``Memento-Datetime``, ``Link``, ``Content-Location``,
                      ``Date``, ``Server``, sent with chunked transfer; an
                      inexact timestamp (fewer than 14 digits) is first
                      redirected to the exact one, without Memento headers
``late.example``      as above, but the memento is 30 s later than asked
``plain.example``     the archived response as it was, no prefixes, no Memento
``loop.example``      redirects to the next second, forever
``moved.example``     the archive redirects to another URL's memento
``redirect.example``  an archived 301 to another page (a memento)
``self.example``      an archived 301 to its own URL (https)
``gone.example``      the archive's own 404 page (not a memento)
``archived404.example`` an archived 404 (a memento)
``busy.example``      the archive's 503
``echo.example``      echoes the request (method, headers, body) as JSON
``big.example``       ``BIG`` bytes with a Content-Length
``bigchunked.example`` ``BIG`` bytes chunked
``gzip.example``      a gzip-encoded archived payload (``Content-Encoding: gzip``)
``cut.example``       sends half the payload, then closes the connection

``app[HITS]`` counts requests per host.
"""

from __future__ import annotations

import gzip
from collections import Counter
from typing import Final

from aiohttp import web

HITS = web.AppKey("hits", Counter[str])
#: A payload with every byte value, CRLFs and no trailing newline.
PAYLOAD: Final = bytes(range(256)) * 1024 + b"\r\n\r\nend"
BIG: Final = b"x" * (3 * 1024 * 1024)
GZIPPED: Final = gzip.compress(b"<html>compressed archived page</html>", mtime=0)
ARCHIVED_DATE: Final = "Wed, 01 Jan 2014 00:00:00 GMT"


def _memento_headers(request: web.Request, date: str = ARCHIVED_DATE) -> dict[str, str]:
    original = request.match_info["url"]
    return {
        "Memento-Datetime": date,
        "Link": f'<{original}>; rel="original", <{request.url}>; rel="memento"',
        "Content-Location": str(request.url),
    }


async def _chunked(
    request: web.Request, status: int, headers: list[tuple[str, str]], body: bytes
) -> web.StreamResponse:
    response = web.StreamResponse(status=status)
    for name, value in headers:
        response.headers.add(name, value)
    response.enable_chunked_encoding()
    await response.prepare(request)
    if request.method == "HEAD":
        body = b""
    for start in range(0, len(body), 7001):
        await response.write(body[start : start + 7001])
    await response.write_eof()
    return response


async def _archived(request: web.Request, date: str) -> web.StreamResponse:
    headers = [
        ("X-Archive-Orig-Server", "Apache"),
        ("Content-Type", "application/octet-stream"),
        ("X-Archive-Orig-Transfer-Encoding", "chunked"),
        ("X-Archive-Orig-Date", date),
        ("X-Archive-Orig-Content-Length", "-1"),
        ("X-Archive-Src", "crawl-1.warc.gz"),
        *_memento_headers(request, date).items(),
    ]
    return await _chunked(request, 200, headers, PAYLOAD)


def replay_archive_app() -> web.Application:
    """The application described in the module docstring."""
    app = web.Application()
    app[HITS] = Counter()

    async def replay(request: web.Request) -> web.StreamResponse:
        timestamp, mod = request.match_info["timestamp"], request.match_info["mod"]
        original = request.match_info["url"]
        host = original.split("://", 1)[-1].split("/", 1)[0]
        request.app[HITS][host] += 1
        if host == "archived.example":
            if len(timestamp) < 14:
                exact = timestamp + "0" * (14 - len(timestamp))
                raise web.HTTPFound(f"/web/{exact}{mod}/{original}")
            return await _archived(request, ARCHIVED_DATE)
        if host == "late.example":
            return await _archived(request, "Wed, 01 Jan 2014 00:00:30 GMT")
        if host == "plain.example":
            headers = [("Content-Type", "text/plain"), ("X-Custom", "kept"), ("Keep-Alive", "5")]
            return await _chunked(request, 200, headers, PAYLOAD)
        if host == "loop.example":
            raise web.HTTPFound(f"/web/{int(timestamp) + 1}id_/{original}")
        if host == "moved.example":
            raise web.HTTPFound(f"/web/{timestamp}id_/http://other.example/")
        if host == "redirect.example":
            return web.Response(
                status=301,
                body=b"moved",
                headers={
                    "X-Archive-Orig-Location": "http://redirect.example/b",
                    "Location": f"/web/{timestamp}id_/http://redirect.example/b",
                    **_memento_headers(request),
                },
            )
        if host == "self.example":
            return web.Response(
                status=301,
                headers={"Location": "https://self.example/", **_memento_headers(request)},
            )
        if host == "gone.example":
            return web.Response(status=404, text="<html>URL Not Found</html>")
        if host == "archived404.example":
            return web.Response(
                status=404, text="archived not found", headers=_memento_headers(request)
            )
        if host == "busy.example":
            return web.Response(status=503, text="try later", headers={"Retry-After": "3"})
        if host == "echo.example":
            echo = {
                "method": request.method,
                "headers": [[k, v] for k, v in request.headers.items()],
                "body": (await request.read()).decode(),
            }
            return web.json_response(echo, headers=_memento_headers(request))
        if host == "big.example":
            return web.Response(body=BIG, headers=_memento_headers(request))
        if host == "bigchunked.example":
            return await _chunked(request, 200, list(_memento_headers(request).items()), BIG)
        if host == "gzip.example":
            gzip_headers = {
                "Content-Type": "text/html",
                "Content-Encoding": "gzip",
                "X-Archive-Orig-Content-Encoding": "gzip",
                **_memento_headers(request),
            }
            return web.Response(body=GZIPPED, headers=gzip_headers)
        if host == "cut.example":
            response = web.StreamResponse(headers=_memento_headers(request))
            response.content_length = len(PAYLOAD)
            await response.prepare(request)
            await response.write(PAYLOAD[: len(PAYLOAD) // 2])
            assert request.transport is not None
            request.transport.close()
            return response
        raise web.HTTPNotFound(text=f"unknown test host {host}")

    app.router.add_route("*", r"/web/{timestamp:\d{1,14}}{mod:[a-z]{2}_|}/{url:.*}", replay)
    return app
