"""A real aiohttp server playing a remote CDX server, for cdx_api tests.

:func:`cdx_server_app` serves CDX lines (a sorted CDXJ file's lines) as a CDX
server would, at ``/{fmt}/cdx`` in every answer format the gateway reads:

``cdxj``      CDXJ lines as stored (pywb ``/cdx`` default)
``ndjson``    one JSON object per line (pywb ``output=json``)
``iajson``    IA JSON: an array of arrays, header row first (IA ``output=json``)
``text11``    11-field space-separated CDX (OpenWayback)
``text7``     7-field IA text (``urlkey timestamp original mimetype statuscode
              digest length``, the IA CDX server default)
``gzip``      CDXJ lines with ``Content-Encoding: gzip``

It honours ``url``, ``matchType`` (the key range pywb's CDX server computes),
``from``, ``to``, ``closest`` with ``sort=closest``, ``sort=reverse`` and
``limit``, records every query it receives in ``app[REQUESTS]``, and writes
answers with chunked transfer in odd-sized pieces (:data:`PIECE_BYTES`) so
lines, JSON strings and escapes are split between chunks. ``/slow/{fmt}/cdx``
writes the first record, then waits for ``app[RELEASE]`` before the rest.

Failure routes: ``/garbage/cdx`` (an HTML page), ``/unavailable/cdx`` (503,
``Retry-After: 7``), ``/throttled/cdx`` (429, ``Retry-After`` as an HTTP
date), ``/bad-gateway/cdx`` (502), ``/missing/cdx`` (404),
``/refusing/cdx`` (400 with the IA CDX server's kind of text),
``/unauthorized/cdx`` (401),
``/truncated/cdx`` (IA JSON cut inside a row), ``/long-line/cdx`` (a 2 MB
line), ``/resume/cdx`` (IA JSON with a ``showResumeKey`` tail).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from datetime import UTC, datetime

from aiohttp import web

from gateway.cdx.query import key_range, pad_timestamp

REQUESTS = web.AppKey("requests", list[dict[str, str]])
RELEASE = web.AppKey("release", asyncio.Event)
FORMATS = ("cdxj", "ndjson", "iajson", "text11", "text7", "gzip")
PIECE_BYTES = 61
IA_FIELDS = ("urlkey", "timestamp", "original", "mimetype", "statuscode", "digest", "length")


def _seconds(ts: str) -> float:
    return (
        datetime.strptime(pad_timestamp(ts, up=False), "%Y%m%d%H%M%S")
        .replace(tzinfo=UTC)
        .timestamp()
    )


def select(lines: list[bytes], params: dict[str, str]) -> list[bytes]:
    """The lines a CDX server answers for ``params`` (pywb ``/cdx`` semantics)."""
    match_type = params.get("matchType", "exact")
    key, end = key_range(params["url"], match_type)  # type: ignore[arg-type]
    chosen = [line for line in lines if key.encode() <= line < end.encode()]
    if "from" in params:
        low = pad_timestamp(params["from"], up=False).encode()
        chosen = [line for line in chosen if line.split(b" ")[1] >= low]
    if "to" in params:
        high = pad_timestamp(params["to"], up=True).encode()
        chosen = [line for line in chosen if line.split(b" ")[1] <= high]
    sort = params.get("sort")
    if sort == "closest" and "closest" in params:
        target = _seconds(params["closest"])
        chosen.sort(key=lambda line: abs(_seconds(line.split(b" ")[1].decode()) - target))
    elif sort == "reverse":
        chosen.reverse()
    if "limit" in params:
        chosen = chosen[: int(params["limit"])]
    return chosen


def _fields(line: bytes) -> tuple[str, str, dict[str, str]]:
    urlkey, timestamp, block = line.decode().split(" ", 2)
    return urlkey, timestamp, json.loads(block)


def render(fmt: str, lines: list[bytes]) -> Iterator[bytes]:
    """The answer body for ``lines`` in ``fmt``, one line or row at a time."""
    if fmt in ("cdxj", "gzip"):
        for line in lines:
            yield line + b"\n"
    elif fmt == "ndjson":
        for line in lines:
            urlkey, timestamp, block = _fields(line)
            yield json.dumps({"urlkey": urlkey, "timestamp": timestamp, **block}).encode() + b"\n"
    elif fmt == "iajson":
        yield b"[" + json.dumps(list(IA_FIELDS)).encode()
        for line in lines:
            urlkey, timestamp, b = _fields(line)
            row = [urlkey, timestamp, b["url"], b.get("mime", "-"), b.get("status", "-")]
            row += [b.get("digest", "-"), b.get("length", "-")]
            yield b",\n" + json.dumps(row).encode()
        yield b"]\n"
    elif fmt in ("text11", "text7"):
        if fmt == "text11":
            yield b" CDX N b a m s k r M S V g\n"
        for line in lines:
            urlkey, timestamp, b = _fields(line)
            values = [urlkey, timestamp, b["url"], b.get("mime", "-"), b.get("status", "-")]
            values.append(b.get("digest", "-"))
            if fmt == "text11":
                values += ["-", "-", b.get("length", "-"), b.get("offset", "-")]
                values.append(b.get("filename", "-"))
            else:
                values.append(b.get("length", "-"))
            yield " ".join(values).encode() + b"\n"
    else:
        raise web.HTTPNotFound(text=f"unknown format {fmt}")


async def _write_pieces(response: web.StreamResponse, data: bytes) -> None:
    for start in range(0, len(data), PIECE_BYTES):
        await response.write(data[start : start + PIECE_BYTES])


async def _stream(
    request: web.Request,
    body: list[bytes],
    *,
    slow: bool = False,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    response = web.StreamResponse(headers=headers or {"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    for i, part in enumerate(body):
        await _write_pieces(response, part)
        if slow and i == 1:  # header row or first line, then the first record
            await asyncio.wait_for(request.app[RELEASE].wait(), 30)
    await response.write_eof()
    return response


def cdx_server_app(lines: list[bytes]) -> web.Application:
    """The application described in the module docstring, serving ``lines``."""
    app = web.Application()
    app[REQUESTS] = []
    app[RELEASE] = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        params = dict(request.query)
        request.app[REQUESTS].append(params)
        fmt = request.match_info["fmt"]
        body = list(render(fmt, select(lines, params)))
        if fmt == "gzip":
            data = gzip.compress(b"".join(body))
            return web.Response(body=data, headers={"Content-Encoding": "gzip"})
        slow = request.path.startswith("/slow/")
        if slow and fmt != "iajson":
            body = [b"", *body]
        return await _stream(request, body, slow=slow)

    async def garbage(request: web.Request) -> web.Response:
        return web.Response(text="<html><body>Welcome to our archive!</body></html>\n")

    async def unavailable(request: web.Request) -> web.Response:
        return web.Response(status=503, text="busy", headers={"Retry-After": "7"})

    async def throttled(request: web.Request) -> web.Response:
        return web.Response(
            status=429, text="slow down", headers={"Retry-After": "Fri, 31 Dec 2999 23:59:59 GMT"}
        )

    async def bad_gateway(request: web.Request) -> web.Response:
        return web.Response(status=502, text="upstream broke")

    async def refusing(request: web.Request) -> web.Response:
        app[REQUESTS].append(dict(request.query))
        return web.Response(
            status=400,
            text="org.archive.wayback.exception.BadQueryException:\n  Invalid URL: "
            + request.query.get("url", ""),
        )

    async def unauthorized(request: web.Request) -> web.Response:
        return web.Response(status=401, text="who are you?")

    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404, text="No Captures found for: " + request.query["url"])

    async def truncated(request: web.Request) -> web.StreamResponse:
        text = b'[["urlkey","timestamp","original"],\n["org,iana)/","20140126200624","http://www.i'
        return await _stream(request, [text])

    async def long_line(request: web.Request) -> web.StreamResponse:
        first = b"org,iana)/ 20140126200624 " + json.dumps({"url": "http://iana.org/"}).encode()
        return await _stream(request, [first + b"\n", b"org,iana)/ 2014 " + b"x" * 2_000_000])

    async def resume(request: web.Request) -> web.StreamResponse:
        body = [
            b'[["urlkey","timestamp","original","statuscode"],\n',
            b'["org,iana)/","20140126200624","http://www.iana.org/","200"],\n',
            b'["org,iana)/","20140127171238","http://iana.org","302"],\n',
            b"[],\n",
            b'["org%2Ciana%29%2F+20140127171239"]]\n',
        ]
        return await _stream(request, body)

    app.router.add_get("/garbage/cdx", garbage)
    app.router.add_get("/unavailable/cdx", unavailable)
    app.router.add_get("/throttled/cdx", throttled)
    app.router.add_get("/bad-gateway/cdx", bad_gateway)
    app.router.add_get("/missing/cdx", missing)
    app.router.add_get("/refusing/cdx", refusing)
    app.router.add_get("/unauthorized/cdx", unauthorized)
    app.router.add_get("/truncated/cdx", truncated)
    app.router.add_get("/long-line/cdx", long_line)
    app.router.add_get("/resume/cdx", resume)
    app.router.add_get("/slow/{fmt}/cdx", answer)
    app.router.add_get("/{fmt}/cdx", answer)
    return app
