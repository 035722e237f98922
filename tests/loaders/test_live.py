"""LiveLoader against a stand-in live web on 127.0.0.1, and the network policy.

Every record served is read back with warcio and checked with ``warcio
check``. Tests of refused destinations run under
:func:`no_connections_except_loopback`: they prove that no socket connected
anywhere (and the guard would block a connection to 10.x or 169.254.x).
"""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.abc import AbstractResolver

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.cdx.query import now_timestamp
from gateway.clients import ClientSettings, SharedClients
from gateway.errors import BadRequest, LiveFetchRefused, LoadError, RecordTooLarge
from gateway.loaders.base import LoadContext, WrappedRequest
from gateway.loaders.live import LiveLoadedRecord, LiveLoader
from tests.loaders.live_web import (
    CHUNKED_PIECES,
    GZIP_PLAIN,
    PAGE_BODY,
    PAGE_HEADERS,
    LiveWeb,
    StaticResolver,
    live_web,
    no_connections_except_loopback,
    parse_records,
    warcio_check,
)

MiB = 1024 * 1024
NAME = "live"


@pytest.fixture
async def web() -> AsyncIterator[LiveWeb]:
    async with live_web() as server:
        yield server


@pytest.fixture
def clients() -> SharedClients:
    # The live loader owns its session; SharedClients only lends its settings.
    return SharedClients(ClientSettings(user_agent="live-test/1.0", contact="t@example.org"))


def make_loader(
    clients: SharedClients,
    *,
    allow_private: bool = True,
    max_record_bytes: int = 10 * MiB,
    resolver: AbstractResolver | None = None,
) -> LiveLoader:
    return LiveLoader(
        NAME,
        clients=clients,
        allow_private_networks=allow_private,
        max_record_bytes=max_record_bytes,
        resolver=resolver,
    )


def live_capture(url: str, source_coll: str = NAME) -> CdxRecord:
    """A record as LiveSource yields it, tagged by the aggregator."""
    try:
        urlkey = canonical_urlkey(url)
    except ValueError:
        urlkey = "-"  # the loader does not read it; some refused URLs have none
    return CdxRecord(
        urlkey,
        now_timestamp(),
        {
            "url": url,
            "load_url": url,
            "is_live": "true",
            "source": source_coll,
            "source-coll": source_coll,
        },
    )


async def _no_original(url: str, timestamp: str, digest: str) -> AsyncIterator[CdxRecord]:
    return
    yield  # pragma: no cover


def ctx(url: str, request: WrappedRequest | None = None) -> LoadContext:
    return LoadContext(
        request_url=url, find_original=_no_original, request=request or WrappedRequest()
    )


async def fetch(
    loader: LiveLoader, url: str, request: WrappedRequest | None = None
) -> tuple[LiveLoadedRecord, bytes]:
    """Load ``url`` and drain the record; returns it and its bytes (no trailing CRLFs)."""
    try:
        loaded = await loader.load(live_capture(url), ctx(url, request))
        try:
            body = b"".join([chunk async for chunk in loaded.body])
        finally:
            await loaded.aclose()
    finally:
        await loader.aclose()
    return loaded, loaded.warc_headers + loaded.http_headers + body


# --------------------------------------------------------------------------- records
async def test_page_is_a_valid_response_and_request_pair(
    web: LiveWeb, clients: SharedClients, tmp_path: Path
) -> None:
    url = web.url("/page")
    before = now_timestamp()
    loaded, data = await fetch(make_loader(clients), url)
    after = now_timestamp()
    assert loaded.content_length == len(data)
    assert before <= loaded.capture.timestamp <= after
    assert loaded.target_uri == url
    [response] = parse_records(data + b"\r\n\r\n")
    assert response.rec_type == "response"
    assert response.headers["WARC-Target-URI"] == url
    assert response.headers["WARC-IP-Address"] == "127.0.0.1"
    assert response.headers["WARC-Date"] == loaded.warc_date
    assert response.http_status_line == "HTTP/1.1 200 OK"
    assert response.payload == PAGE_BODY
    names = [name for name, _ in response.http_headers]
    # the server's headers in its order and case (aiohttp adds Content-Length, Date, Server)
    assert [n for n in names if n in dict(PAGE_HEADERS)] == [n for n, _ in PAGE_HEADERS]

    assert loaded.request is not None
    request_bytes = loaded.request.to_bytes()
    [request] = parse_records(request_bytes + b"\r\n\r\n")
    assert request.rec_type == "request"
    assert request.headers["WARC-Concurrent-To"] == response.headers["WARC-Record-ID"]
    assert request.headers["WARC-Record-ID"] == loaded.request.record_id
    assert loaded.request.http_headers.startswith(b"GET /page HTTP/1.1\r\n")
    sent = dict(request.http_headers)
    assert sent["User-Agent"] == "live-test/1.0 (contact: t@example.org)"
    assert sent["Host"] == url.removeprefix("http://").removesuffix("/page")
    warcio_check([data, request_bytes], tmp_path)
    assert web.hits["/page"] == 1


async def test_redirect_is_served_as_the_record_it_is(
    web: LiveWeb, clients: SharedClients, tmp_path: Path
) -> None:
    _, data = await fetch(make_loader(clients), web.url("/redirect"))
    [record] = parse_records(data + b"\r\n\r\n")
    assert record.http_status_line == "HTTP/1.1 302 Found"
    assert ("Location", "/page") in record.http_headers
    assert record.payload == b"moved"
    assert web.hits["/page"] == 0  # not followed
    warcio_check([data], tmp_path)


async def test_chunked_response_does_not_claim_chunked_framing(
    web: LiveWeb, clients: SharedClients, tmp_path: Path
) -> None:
    _, data = await fetch(make_loader(clients), web.url("/chunked"))
    [record] = parse_records(data + b"\r\n\r\n")
    headers = dict(record.http_headers)
    assert "Transfer-Encoding" not in headers
    assert headers["X-Archive-Orig-Transfer-Encoding"] == "chunked"
    assert record.payload == b"".join(CHUNKED_PIECES)
    warcio_check([data], tmp_path)


async def test_content_encoding_is_kept_not_decoded(
    web: LiveWeb, clients: SharedClients, tmp_path: Path
) -> None:
    _, data = await fetch(make_loader(clients), web.url("/gzip"))
    [record] = parse_records(data + b"\r\n\r\n")
    assert dict(record.http_headers)["Content-Encoding"] == "gzip"
    assert gzip.decompress(record.payload) == GZIP_PLAIN
    warcio_check([data], tmp_path)


@pytest.mark.parametrize("spool_memory_bytes", [1024, 8 * MiB])
async def test_body_at_the_limit_loads_in_memory_or_on_disk(
    web: LiveWeb, clients: SharedClients, tmp_path: Path, spool_memory_bytes: int
) -> None:
    size = 2 * MiB + 5
    loader = make_loader(clients, max_record_bytes=size)
    loader.spool_memory_bytes = spool_memory_bytes
    _, data = await fetch(loader, web.url(f"/big?size={size}"))
    [record] = parse_records(data + b"\r\n\r\n")
    assert len(record.payload) == size
    assert set(record.payload) == {ord("x")}
    warcio_check([data], tmp_path)


# --------------------------------------------------------------------------- limits
@pytest.mark.parametrize("announce", [False, True], ids=["chunked", "content-length"])
async def test_too_large_aborts_the_upstream_read(
    web: LiveWeb, clients: SharedClients, announce: bool
) -> None:
    size = 64 * MiB
    path = f"/big?size={size}" + ("&announce" if announce else "")
    loader = make_loader(clients, max_record_bytes=1 * MiB)
    with pytest.raises(RecordTooLarge) as caught:
        await fetch(loader, web.url(path))
    message = caught.value.message
    assert message.startswith(f"live response for {web.url(path)} exceeds max_record_bytes=")
    assert f"max_record_bytes={MiB}" in message
    assert "collections.yaml" in message
    assert isinstance(caught.value, LoadError)
    # the connection was dropped: the server could not write most of the body
    assert web.sent[path] < size // 2


# --------------------------------------------------------------------------- wrapped requests
async def test_wrapped_request_goes_upstream_unaltered(
    web: LiveWeb, clients: SharedClients, tmp_path: Path
) -> None:
    url = web.url("/echo?q=1")
    host = url.removeprefix("http://").split("/")[0]
    headers = (
        ("Host", host),
        ("connection", "keep-alive"),
        ("Keep-Alive", "timeout=5"),
        ("TE", "trailers"),
        ("X-Mixed-CASE", "Value"),
        ("Cookie", "a=1"),
        ("Cookie", "b=2"),
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Content-Length", "7"),
    )
    request = WrappedRequest(method="POST", headers=headers, body=b"a=1&b=2")
    loaded, data = await fetch(make_loader(clients), url, request)
    [record] = parse_records(data + b"\r\n\r\n")
    echoed = json.loads(record.payload)
    assert echoed["method"] == "POST"
    assert echoed["target"] == "/echo?q=1"
    assert [tuple(pair) for pair in echoed["headers"]] == list(headers)
    assert echoed["body"] == "a=1&b=2"
    assert loaded.request is not None
    [sent] = parse_records(loaded.request.to_bytes() + b"\r\n\r\n")
    assert sent.http_headers == list(headers)
    assert sent.payload == b"a=1&b=2"
    assert loaded.request.http_headers.startswith(b"POST /echo?q=1 HTTP/1.1\r\n")
    warcio_check([data, loaded.request.to_bytes()], tmp_path)


async def test_wrapped_chunked_request_is_rechunked(
    web: LiveWeb, clients: SharedClients, tmp_path: Path
) -> None:
    headers = (("Transfer-Encoding", "chunked"), ("Content-Length", "99"), ("X-A", "1"))
    request = WrappedRequest(method="PUT", headers=headers, body=b"chunked body")
    loaded, data = await fetch(make_loader(clients), web.url("/echo"), request)
    [record] = parse_records(data + b"\r\n\r\n")
    echoed = json.loads(record.payload)
    received = [tuple(pair) for pair in echoed["headers"]]
    assert echoed["method"] == "PUT"
    assert echoed["body"] == "chunked body"
    assert ("Transfer-Encoding", "chunked") in received
    assert not any(name.lower() == "content-length" for name, _ in received)
    assert loaded.request is not None
    [sent] = parse_records(loaded.request.to_bytes() + b"\r\n\r\n")
    assert ("X-Archive-Orig-Transfer-Encoding", "chunked") in sent.http_headers
    assert sent.payload == b"chunked body"
    warcio_check([data, loaded.request.to_bytes()], tmp_path)


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        (WrappedRequest(headers=(("X-Bad", "a\r\nInjected: 1"),)), "CR, LF or NUL"),
        (WrappedRequest(headers=(("Bad Name", "v"),)), "not an HTTP token"),
        (WrappedRequest(method="GE T"), "not an HTTP token"),
        (
            WrappedRequest(method="POST", headers=(("Content-Length", "3"),), body=b"12345"),
            "does not match",
        ),
    ],
)
async def test_unsendable_wrapped_request_is_a_bad_request(
    web: LiveWeb, clients: SharedClients, request_: WrappedRequest, problem: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        await fetch(make_loader(clients), web.url("/echo"), request_)
    assert caught.value.param == "request"
    assert problem in caught.value.message
    assert web.hits["/echo"] == 0


async def test_wrapped_head_request_has_headers_and_no_payload(
    web: LiveWeb, clients: SharedClients, tmp_path: Path
) -> None:
    request = WrappedRequest(method="HEAD", headers=(("Accept", "text/html"),))
    loaded, data = await fetch(make_loader(clients), web.url("/page"), request)
    [record] = parse_records(data + b"\r\n\r\n")
    assert record.http_status_line == "HTTP/1.1 200 OK"
    assert dict(record.http_headers)["Content-Length"] == str(len(PAGE_BODY))
    assert record.payload == b""
    assert loaded.request is not None
    assert loaded.request.http_headers.startswith(b"HEAD /page HTTP/1.1\r\n")
    warcio_check([data, loaded.request.to_bytes()], tmp_path)


# --------------------------------------------------------------------------- accepts
def test_accepts_only_live_captures_of_its_source(clients: SharedClients) -> None:
    loader = make_loader(clients)
    assert loader.accepts(live_capture("http://example.com/"))
    assert not loader.accepts(live_capture("http://example.com/", source_coll="other"))
    not_live = live_capture("http://example.com/")
    del not_live.fields["is_live"]
    assert not loader.accepts(not_live)
    archived = CdxRecord(
        "com,example)/", "20140101000000", {"filename": "a.warc.gz", "source-coll": NAME}
    )
    assert not loader.accepts(archived)


# --------------------------------------------------------------------------- network policy
@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://10.0.0.1/", "private network"),
        ("http://192.168.1.1:8080/admin", "private network"),
        ("http://172.16.5.4/", "private network"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata endpoint"),
        ("http://[fd00:ec2::254]/latest/meta-data/", "cloud metadata endpoint"),
        ("http://169.254.1.1/", "link-local"),
        ("http://100.64.0.1/", "carrier-grade NAT"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
        ("http://[::1]/", "loopback"),
        ("http://[::ffff:10.0.0.1]/", "private network"),
        ("http://[fe80::1]/", "link-local"),
    ],
)
async def test_refused_ip_literals_send_nothing(
    clients: SharedClients, url: str, reason: str
) -> None:
    loader = make_loader(clients, allow_private=False)
    with no_connections_except_loopback() as attempts, pytest.raises(LiveFetchRefused) as caught:
        await fetch(loader, url)
    assert attempts == []
    assert reason in caught.value.message
    assert "allow_private_networks: true" in caught.value.message


async def test_loopback_is_refused_unless_allowed(web: LiveWeb, clients: SharedClients) -> None:
    url = web.url("/page")
    with no_connections_except_loopback() as attempts, pytest.raises(LiveFetchRefused) as caught:
        await fetch(make_loader(clients, allow_private=False), url)
    assert "loopback" in caught.value.message
    assert attempts == []
    assert web.hits["/page"] == 0
    await fetch(make_loader(clients, allow_private=True), url)
    assert web.hits["/page"] == 1


async def test_names_resolving_to_refused_addresses_are_refused(
    web: LiveWeb, clients: SharedClients
) -> None:
    port = web.base.rsplit(":", 1)[1]
    dns = StaticResolver(
        {
            "rebind.test": ["127.0.0.1"],
            "intranet.test": ["10.0.0.1", "192.168.0.10"],
            "metadata.test": ["169.254.169.254"],
        }
    )
    loader = make_loader(clients, allow_private=False, resolver=dns)
    for name, reason in [
        ("rebind.test", "127.0.0.1: loopback"),
        ("intranet.test", "10.0.0.1: private network"),
        ("metadata.test", "169.254.169.254: cloud metadata endpoint"),
    ]:
        with no_connections_except_loopback() as attempts:
            with pytest.raises(LiveFetchRefused) as caught:
                await fetch(loader, f"http://{name}:{port}/page")
            assert attempts == []
        assert f"refused to connect to {name}" in caught.value.message
        assert reason in caught.value.message
    assert dns.asked == ["rebind.test", "intranet.test", "metadata.test"]
    assert web.hits["/page"] == 0
    # The same resolver is what the connection uses: allowed, the name reaches the server.
    allowed = make_loader(clients, allow_private=True, resolver=dns)
    loaded, _ = await fetch(allowed, f"http://rebind.test:{port}/page")
    assert loaded.target_uri == f"http://rebind.test:{port}/page"
    assert web.hits["/page"] == 1


async def test_localhost_is_refused_after_system_resolution(
    web: LiveWeb, clients: SharedClients
) -> None:
    port = web.base.rsplit(":", 1)[1]
    with no_connections_except_loopback() as attempts, pytest.raises(LiveFetchRefused) as caught:
        await fetch(make_loader(clients, allow_private=False), f"http://localhost:{port}/page")
    assert attempts == []
    assert "loopback" in caught.value.message
    assert web.hits["/page"] == 0


async def test_decimal_ipv4_host_is_not_a_way_around(web: LiveWeb, clients: SharedClients) -> None:
    # aiohttp 3.14 rejects the legacy numeric form itself; were it resolved,
    # getaddrinfo would answer 127.0.0.1 and the GuardedResolver refuse it.
    port = web.base.rsplit(":", 1)[1]
    with no_connections_except_loopback() as attempts, pytest.raises(LoadError):
        await fetch(make_loader(clients, allow_private=False), f"http://2130706433:{port}/page")
    assert attempts == []
    assert web.hits["/page"] == 0


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://example.com/file", "only http:// and https://"),
        ("file:///etc/passwd", "only http:// and https://"),
        ("gopher://example.com/", "only http:// and https://"),
        ("http:///no-host", "only http:// and https://"),
        ("http://[::1/", "not a valid URL"),
        ("http://example.com:99999/", "not a valid URL"),
        # IDNA refuses the host: getaddrinfo would raise UnicodeError (a 500)
        ("http://\u2488.com/", "not a valid URL"),
        ("http://a..b/", "not a valid URL"),
    ],
)
async def test_urls_that_are_not_http_are_refused(
    clients: SharedClients, url: str, problem: str
) -> None:
    with no_connections_except_loopback() as attempts, pytest.raises(LiveFetchRefused) as caught:
        await fetch(make_loader(clients, allow_private=True), url)
    assert attempts == []
    assert problem in caught.value.message


async def test_connection_refused_upstream_is_a_load_error(clients: SharedClients) -> None:
    # A port nothing listens on (bound, never listening): connection refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with pytest.raises(LoadError) as caught:
            await fetch(make_loader(clients), f"http://127.0.0.1:{port}/")
    assert not isinstance(caught.value, LiveFetchRefused)
    assert f"live fetch of http://127.0.0.1:{port}/ failed: cannot connect" in caught.value.message


async def test_aclose_closes_the_session(web: LiveWeb, clients: SharedClients) -> None:
    loader = make_loader(clients)
    loaded = await loader.load(live_capture(web.url("/page")), ctx(web.url("/page")))
    await loaded.aclose()
    session = loader._session
    assert session is not None
    assert not session.closed
    await loader.aclose()
    assert session.closed
    await loader.aclose()  # idempotent
