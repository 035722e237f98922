"""The request's Host and every client URL are validated and normalised once, at the edge.

``Host`` values are sent on raw sockets to a real ``gateway serve``: the
test client (and ``http.client``) would encode or refuse them first. A
``Host`` that is not UTF-8 (``\\xe9vil.com``) used to be a 500 on every
Memento route (``UnicodeEncodeError`` writing ``Location``/``Link``); a
UTF-8 one (``évil.com``) went raw into ``Location`` and percent-encoded into
``Link``. A client URL whose host IDNA refuses (``⒈.com``: an empty label
once mapped, or a disallowed code point) passed the URL check and crashed
the ``$live`` fetch (``UnicodeError: label empty or too long``).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Final
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.config import parse_config
from gateway.errors import ConfigError
from tests.conftest import MakeClient, serve_sample_iana

Client = TestClient[web.Request, web.Application]

URL: Final = "http://www.iana.org/"
#: Every route that writes the gateway's own URIs (Location, Link, TimeMaps).
MEMENTO_TARGETS: Final = (
    f"/iana/timegate/{URL}",
    f"/iana/{URL}",  # the wayback-style TimeGate
    f"/iana/timemap/link/{URL}",
    f"/iana/timemap/json/{URL}",
    f"/iana/timemap/cdxj/{URL}",
    f"/iana/20140126200624id_/{URL}",
    f"/iana/2014id_/{URL}",  # redirects to the exact capture
)
#: ``évil.com`` in IDNA ASCII (``é`` is U+00E9).
EVIL_ACE: Final = "xn--vil-9la.com"


@pytest.fixture(scope="module")
def gateway_port(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Iterator[int]:
    server, port = serve_sample_iana(tmp_path_factory.mktemp("hosts"), sample_dir)
    try:
        yield port
    finally:
        server.stop()
        log = server.stderr_path.read_text("utf-8", errors="replace")
        assert "Traceback" not in log, log[-3000:]
        assert " ERROR " not in log, log[-3000:]


Answer = tuple[int, dict[str, str], bytes]


def raw_get(port: int, target: str, host: bytes, method: str = "GET") -> Answer:
    """``method target`` with ``Host: host`` exactly as given; status, headers, body."""
    request = (
        f"{method} {target} HTTP/1.1\r\n".encode("ascii")
        + b"Host: "
        + host
        + b"\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.split(b"\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(b":")
        # Every header the gateway writes must be ASCII.
        headers[name.decode("ascii").lower()] = value.strip().decode("ascii")
    return int(status_line.split()[1]), headers, body


@pytest.mark.parametrize("target", MEMENTO_TARGETS)
@pytest.mark.parametrize(
    "host",
    [
        b"\xe9vil.com",  # Latin-1, not UTF-8
        b"\xe9vil.com:8080",
        b"a..b",
        b"\xe2\x92\x88.com",  # U+2488
        b"xn---bbk.com",  # not the canonical Punycode of its U-label
        b"a b.com",
        b"example.com:99999",
        b"example.com:8o",
        b"[::1",
        b"",
    ],
)
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_an_invalid_host_is_a_400_naming_host(
    gateway_port: int, target: str, host: bytes, method: str
) -> None:
    status, headers, body = raw_get(gateway_port, target, host, method)
    assert status == 400, (host, target, body)
    assert "json" in headers["content-type"]
    if method == "GET":
        answer = json.loads(body)
        assert answer["param"] == "Host", answer
        assert answer["message"].startswith("Host: "), answer


def test_a_utf8_host_is_written_in_idna_in_location_and_link(gateway_port: int) -> None:
    for target in (f"/iana/timegate/{URL}", f"/iana/{URL}", f"/iana/2014id_/{URL}"):
        status, headers, _ = raw_get(gateway_port, target, "Évil.com".encode())
        assert status == 302, target
        assert headers["location"].startswith(f"http://{EVIL_ACE}/iana/"), headers
        assert f"<http://{EVIL_ACE}/iana/timegate/{URL}>" in headers["link"], headers
        assert "%C3" not in headers["link"]
    evil = "évil.com".encode()
    status, headers, body = raw_get(gateway_port, f"/iana/timemap/link/{URL}", evil + b":80")
    assert status == 200
    assert f'<http://{EVIL_ACE}:80/iana/timemap/link/{URL}>; rel="self"' in body.decode()
    assert f"<http://{EVIL_ACE}:80/iana/timegate/{URL}>" in headers["link"]
    status, headers, body = raw_get(gateway_port, f"/iana/timemap/json/{URL}", evil)
    assert json.loads(body)["timegate_uri"] == f"http://{EVIL_ACE}/iana/timegate/{URL}"
    status, headers, _ = raw_get(gateway_port, f"/iana/20140126200624id_/{URL}", evil)
    assert status == 200
    assert f"<http://{EVIL_ACE}/iana/20140126200624id_/{URL}>" in headers["link"]


@pytest.mark.parametrize(
    ("host", "written"),
    [
        (b"Archive.Example.ORG:08080", "archive.example.org:8080"),
        (b"[0:0::1]:80", "[::1]:80"),
        (b"r3---sn-x_y.example.com", "r3---sn-x_y.example.com"),  # as DNS has them
        ("Bücher.example".encode(), "xn--bcher-kva.example"),
        ("ｅｘａｍｐｌｅ．com".encode(), "example.com"),  # full-width: UTS #46 mapping
    ],
)
def test_valid_hosts_are_normalised(gateway_port: int, host: bytes, written: str) -> None:
    status, headers, _ = raw_get(gateway_port, f"/iana/timegate/{URL}", host)
    assert status == 302
    assert headers["location"] == f"http://{written}/iana/20140126200624id_/{URL}"


# -- client URLs ---------------------------------------------------------------------


@pytest.fixture
async def client(make_client: MakeClient, sample_dir: Path) -> Client:
    s = sample_dir
    return await make_client(f"""
memento:
  public_url: HTTPS://Archive.Example.ORG/gw/
collections:
  file: {{index: {s}/cdxj/iana.cdxj, resource: {s}/warcs/}}
  live: $live
""")


@pytest.mark.parametrize("coll", ["live", "file"])
@pytest.mark.parametrize(
    "url", ["http://\u2488.com/", "http://a\u200db.com/", "http://%E9vil.com/"]
)
async def test_a_url_whose_host_idna_refuses_is_a_400_naming_url(
    client: Client, coll: str, url: str
) -> None:
    for route in ("index", "resource", "cdx"):
        resp = await client.get(f"/{coll}/{route}", params={"url": url})
        body = await resp.json()
        assert resp.status == 400, (route, body)
        assert body["param"] == "url"
        assert "cannot parse URL" in body["message"]
    for route in ("timegate/", "timemap/link/", "timemap/json/", "20140126200624id_/", ""):
        resp = await client.get(f"/{coll}/{route}{quote(url, safe=':/%')}")
        body = await resp.json()
        assert resp.status == 400, (route, body)
        assert body["param"] == "url"


async def test_an_idna_host_is_looked_up_and_linked_in_ascii(client: Client) -> None:
    resp = await client.get("/live/index", params={"url": "http://Bücher.example/a?q=ü"})
    [line] = (await resp.text()).splitlines()
    assert line.startswith("example,xn--bcher-kva)/a?q=")
    assert json.loads(line.split(" ", 2)[2])["url"] == "http://xn--bcher-kva.example/a?q=ü"
    # The path form (percent-encoded, as clients must send it) reads the same host.
    resp = await client.get("/live/timegate/http://B%C3%BCcher.example/", allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"].startswith("https://archive.example.org/gw/live/")
    assert resp.headers["Location"].endswith("id_/http://xn--bcher-kva.example/")
    assert '<http://xn--bcher-kva.example/>; rel="original"' in resp.headers["Link"]


async def test_the_public_url_starts_every_uri_the_gateway_writes(client: Client) -> None:
    resp = await client.get(f"/file/timegate/{URL}", allow_redirects=False)
    assert resp.status == 302
    base = "https://archive.example.org/gw/file"
    assert resp.headers["Location"] == f"{base}/20140126200624id_/{URL}"
    assert f"<{base}/timemap/link/{URL}>" in resp.headers["Link"]
    assert "127.0.0.1" not in resp.headers["Link"]
    resp = await client.get(f"/file/timemap/link/{URL}")
    assert f"<{base}/20140126200624id_/{URL}>" in await resp.text()
    # An invalid Host is refused all the same (RFC 9112 §3.2).
    resp = await client.get(f"/file/timegate/{URL}", headers={"Host": "a..b"})
    assert resp.status == 400
    assert (await resp.json())["param"] == "Host"


@pytest.mark.parametrize(
    "value",
    [
        "archive.example.org",
        "ftp://archive.example.org",
        "https://a..b/",
        "https://x/?q=1",
        "https://u@x/",
    ],
)
def test_an_invalid_public_url_is_a_config_error_naming_it(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"memento:\n  public_url: {json.dumps(value)}\n")
    assert caught.value.path == "memento.public_url"


def test_the_public_url_is_normalised_at_load() -> None:
    config = parse_config("memento: {public_url: 'http://Bücher.example:8080/'}\n")
    assert config.memento.public_url == "http://xn--bcher-kva.example:8080"
