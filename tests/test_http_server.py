"""Raw bytes past ASCII in a request target are read as percent-encoded.

The server is ``gateway.server.http_server``.

A real ``gateway serve`` gets raw request bytes over a socket, as curl
sends ``?url=münchen.de/``: each answer must be the one the percent-encoded
request gets, on fresh and kept-alive connections, with the request line
split across reads, after a request whose body holds such bytes; and the
log must hold no error and no traceback.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.server.http_server import percent_encode_past_ascii
from tests.conftest import _Server, serve_sample_iana


@dataclass(frozen=True)
class Gateway:
    server: _Server
    port: int


_INDEX = "/iana/index?url=http://www.iana.org/&matchType=prefix&filter=!url:{}&limit=5"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Iterator[Gateway]:
    """One ``gateway serve`` for the module; its log must end with no error or traceback."""
    server, port = serve_sample_iana(tmp_path_factory.mktemp("http-server"), sample_dir)
    try:
        yield Gateway(server, port)
    finally:
        server.stop()
    log = server.stderr_path.read_text()
    assert "Traceback" not in log
    assert " ERROR " not in log


def _read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP/1.1 answer with a Content-Length: (status line, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return lines[0], body


def _ask(port: int, *parts: bytes) -> tuple[bytes, bytes]:
    """Send ``parts`` (each its own write, 50 ms apart) on a new connection; read one answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        for i, part in enumerate(parts):
            if i:
                time.sleep(0.05)
            sock.sendall(part)
        return _read_answer(sock)


def _get(target: bytes) -> bytes:
    return b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def test_raw_utf8_in_the_query_is_answered_as_if_percent_encoded(gateway: Gateway) -> None:
    raw = _INDEX.format("münchen").encode()
    encoded = _INDEX.format("m%C3%BCnchen").encode()
    status, body = _ask(gateway.port, _get(raw))
    assert (status, body) == _ask(gateway.port, _get(encoded))
    assert status == b"HTTP/1.1 200 OK"
    assert len(body.splitlines()) == 5


def test_raw_utf8_url_gets_the_app_answer_not_aiohttp_plain_400(gateway: Gateway) -> None:
    status, body = _ask(gateway.port, _get("/iana/index?url=münchen.de/".encode()))
    assert status == b"HTTP/1.1 200 OK"  # a valid URL with no captures: an empty CDXJ answer
    assert body == b""
    # Bytes that are not UTF-8 reach the URL check, which names the parameter.
    status, body = _ask(gateway.port, _get(b"/iana/index?url=m\xfcnchen.de/"))
    assert status == b"HTTP/1.1 400 Bad Request"
    assert b'"param": "url"' in body


def test_raw_utf8_in_the_path_and_a_line_split_across_reads(gateway: Gateway) -> None:
    whole = "/iana/timegate/http://www.iana.org/ü".encode()
    expected = _ask(gateway.port, _get(percent_encode_past_ascii(whole)))
    assert expected[0] == b"HTTP/1.1 404 Not Found"
    request = _get(whole)
    cut = request.index(b"\xc3") + 1  # in the middle of the two bytes of "ü"
    for parts in ([request], [request[:10], request[10:]], [request[:cut], request[cut:]]):
        assert _ask(gateway.port, *parts) == expected


def test_kept_alive_connection_after_a_body_with_such_bytes(gateway: Gateway) -> None:
    raw = _INDEX.format("münchen").encode()
    expected = _ask(gateway.port, _get(raw))
    body = "url=http://www.iana.org/ü&x=ü".encode()
    post = (
        b"POST /iana/index?url=http://www.iana.org/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(_get(_INDEX.format("x").encode()))
        assert _read_answer(sock)[0] == b"HTTP/1.1 200 OK"
        sock.sendall(_get(raw))
        assert _read_answer(sock) == expected
        sock.sendall(post)  # the body comes in a later read: it is not a request line
        time.sleep(0.05)
        sock.sendall(body)
        assert _read_answer(sock)[0] == b"HTTP/1.1 200 OK"
        sock.sendall(_get(raw))
        assert _read_answer(sock) == expected


def test_a_target_malformed_otherwise_is_still_aiohttp_400(gateway: Gateway) -> None:
    # A space inside the target: aiohttp answers before the app, as documented.
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        sock.sendall(_get("/iana/index?url=a bü".encode()))
        assert sock.recv(65536).startswith(b"HTTP/1.0 400 Bad Request")
    for _ in range(100):
        if "refused by aiohttp (400)" in gateway.server.stderr_path.read_text():
            break
        time.sleep(0.05)
    assert "refused by aiohttp (400)" in gateway.server.stderr_path.read_text()
