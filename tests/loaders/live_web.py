"""A stand-in live web on 127.0.0.1, and helpers to check what the gateway made of it.

:func:`live_web` serves (aiohttp ``TestServer``):

``/page``           200 text/html ``PAGE_BODY``, headers in a fixed order and case
``/redirect``       302 to ``/page`` (never followed by the live loader)
``/big?size=N``     N bytes streamed without Content-Length (chunked), 64 KiB at a time;
                    ``&announce`` sends ``Content-Length: N`` instead; what was
                    written before the client went away is in ``sent[path_qs]``
``/chunked``        three pieces with ``Transfer-Encoding: chunked``
``/gzip``           a gzip body with ``Content-Encoding: gzip``
``/echo``           any method: JSON of the method, target, raw headers (order and
                    case kept) and body (latin-1) as received

``hits`` counts requests per path. :class:`StaticResolver` is a stand-in
DNS with fixed answers. :func:`no_connections_except_loopback`
records every ``socket.connect`` of the process (a ``sys.addaudithook``
hook) and blocks those to anything but 127.0.0.1, so a test can prove that
no packet left for a refused address. :func:`warcio_check` runs ``warcio
check -v`` on records; :func:`parse_records` reads them with warcio.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import ipaddress
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.test_utils import TestServer
from warcio.archiveiterator import ArchiveIterator

PAGE_BODY = b"<html><body>hello from the live web</body></html>"
PAGE_HEADERS = (("Content-Type", "text/html"), ("X-Mixed-Case", "Kept"), ("x-lower", "kept"))
CHUNKED_PIECES = (b"first piece;", b"second piece;", b"last piece")
GZIP_PLAIN = b"compressed content " * 20
CHUNK = b"x" * 65536


@dataclass
class LiveWeb:
    """The running stand-in server: ``url(path)``, request ``hits``, ``sent`` bytes."""

    base: str
    hits: Counter[str] = field(default_factory=Counter)
    sent: dict[str, int] = field(default_factory=dict)

    def url(self, path: str) -> str:
        return self.base + path


def _app(state: LiveWeb) -> web.Application:
    async def count(request: web.Request) -> None:
        state.hits[request.path] += 1

    async def page(request: web.Request) -> web.Response:
        await count(request)
        response = web.Response(body=PAGE_BODY)
        response.headers.clear()
        for name, value in PAGE_HEADERS:
            response.headers.add(name, value)
        return response

    async def redirect(request: web.Request) -> web.Response:
        await count(request)
        return web.Response(status=302, headers={"Location": "/page"}, body=b"moved")

    async def big(request: web.Request) -> web.StreamResponse:
        await count(request)
        size = int(request.query["size"])
        response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if "announce" in request.query:
            response.content_length = size
        await response.prepare(request)
        sent = 0
        state.sent[request.path_qs] = 0
        try:
            while sent < size:
                piece = CHUNK[: size - sent]
                await response.write(piece)
                sent += len(piece)
                state.sent[request.path_qs] = sent
            await response.write_eof()
        except ConnectionError:
            pass  # the gateway dropped the connection: what we wanted to see
        return response

    async def chunked(request: web.Request) -> web.StreamResponse:
        await count(request)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for piece in CHUNKED_PIECES:
            await response.write(piece)
        await response.write_eof()
        return response

    async def gzipped(request: web.Request) -> web.Response:
        await count(request)
        return web.Response(
            body=gzip.compress(GZIP_PLAIN, mtime=0),
            headers={"Content-Type": "text/plain", "Content-Encoding": "gzip"},
        )

    async def echo(request: web.Request) -> web.Response:
        await count(request)
        body = await request.read()
        return web.json_response(
            {
                "method": request.method,
                "target": request.raw_path,
                "headers": [
                    [k.decode("latin-1"), v.decode("latin-1")] for k, v in request.raw_headers
                ],
                "body": body.decode("latin-1"),
            }
        )

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/big", big)
    app.router.add_get("/chunked", chunked)
    app.router.add_get("/gzip", gzipped)
    app.router.add_route("*", "/echo", echo)
    return app


@contextlib.asynccontextmanager
async def live_web() -> AsyncIterator[LiveWeb]:
    """Serve the stand-in live web on 127.0.0.1 (a free port) while the block runs."""
    state = LiveWeb(base="")
    server = TestServer(_app(state), host="127.0.0.1", port=0)
    await server.start_server()
    try:
        state.base = f"http://127.0.0.1:{server.port}"
        yield state
    finally:
        await server.close()


# --------------------------------------------------------------------------- names
class StaticResolver(AbstractResolver):
    """A stand-in DNS: fixed answers per name (no network, no /etc/hosts edits)."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in self.answers:
            raise OSError(f"stand-in DNS: no such name {host}")
        return [
            {
                "hostname": host,
                "host": address,
                "port": port,
                "family": socket.AF_INET6
                if ipaddress.ip_address(address).version == 6
                else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in self.answers[host]
        ]

    async def close(self) -> None:
        pass


# --------------------------------------------------------------------------- connections
_connects: list[list[tuple[Any, ...]]] = []
_hook_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect" or not _connects:
        return
    address = args[1]
    _connects[-1].append(address)
    host = address[0] if isinstance(address, tuple) else address
    if host != "127.0.0.1":
        raise PermissionError(f"test guard: connection to {address!r} blocked")


@contextlib.contextmanager
def no_connections_except_loopback() -> Iterator[list[tuple[Any, ...]]]:
    """Record (and block, unless to 127.0.0.1) every socket.connect in the block.

    Yields the list of addresses connected to; a test asserts on it.
    """
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)
        _hook_installed = True
    attempts: list[tuple[Any, ...]] = []
    _connects.append(attempts)
    try:
        yield attempts
    finally:
        _connects.remove(attempts)


# --------------------------------------------------------------------------- records
@dataclass
class ParsedRecord:
    rec_type: str
    headers: dict[str, str]
    http_status_line: str
    http_headers: list[tuple[str, str]]
    payload: bytes


def parse_records(data: bytes) -> list[ParsedRecord]:
    """Records of ``data`` (WARC records, each followed by CRLF CRLF), payloads raw."""
    out = []
    for record in ArchiveIterator(io.BytesIO(data), ensure_http_headers=False):
        http = record.http_headers
        out.append(
            ParsedRecord(
                rec_type=record.rec_type,
                headers=dict(record.rec_headers.headers),
                http_status_line=http.protocol + " " + http.statusline if http else "",
                http_headers=list(http.headers) if http else [],
                payload=record.raw_stream.read(),
            )
        )
    return out


def warcio_check(records: list[bytes], folder: Path) -> str:
    """Run ``warcio check -v`` over ``records`` written as one WARC; returns its output.

    Raises AssertionError when warcio reports a problem (exit status 1). Run
    in a child process: warcio leaves its digest buffers to the collector.
    """
    path = folder / "checked.warc"
    path.write_bytes(b"".join(record + b"\r\n\r\n" for record in records))
    code = "import sys; from warcio.cli import main; main(sys.argv[1:])"
    done = subprocess.run(
        [sys.executable, "-c", code, "check", "-v", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("digest pass") == len(records), done.stdout
    return done.stdout
