"""The post-request API: a whole HTTP request as the body of a POST.

Captures of POST and PUT requests are found by their bodies in indexes written
by cdxj-indexer (``gateway.index.indexer``): the sample's post-test.warc.gz and a
WARC written here with JSON, multipart, binary, text and long form bodies. A
stand-in live web on 127.0.0.1 records what it receives, proving that the
wrapped method, headers (order, case, hop-by-hop ones) and body go upstream
unaltered through a ``{type: live, allow_private_networks: true}`` source.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.config import parse_config
from gateway.index.indexer import write_cdxj_index
from gateway.server.app import create_app
from tests.conftest import MakeClient

Client = TestClient[web.Request, web.Application]

#: The three spellings of the post-request Resource API, and the two of the Index API.
RESOURCE_ROUTES = ("resource/postreq", "postreq/resource", "resource-post")
INDEX_ROUTES = ("index/postreq", "postreq/index")

#: The POSTs of post-test.warc.gz: target, form body, capture timestamp, httpbin's "form".
POST_TEST = (
    ("/post", b"foo=bar&test=abc", "20140610000859", {"foo": "bar", "test": "abc"}),
    ("/post", b"A=1&B=[]&C=3", "20140610001151", {"A": "1", "B": "[]", "C": "3"}),
    ("/post?foo=bar", b"data=^", "20140610001255", {"data": "^"}),
)
FORM = "application/x-www-form-urlencoded"


def wrapped(
    method: str,
    target: str,
    body: bytes = b"",
    *,
    host: str = "httpbin.org",
    content_type: str | None = FORM,
    extra: tuple[tuple[str, str], ...] = (),
) -> bytes:
    """An HTTP/1.1 request message as curl sends it."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Accept: */*"]
    lines += [f"{name}: {value}" for name, value in extra]
    if body:
        if content_type:
            lines.append(f"Content-Type: {content_type}")
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class Served:
    """One WARC record of a Resource API answer, read by warcio."""

    rec_type: str
    target_uri: str
    warc_date: str
    http_headers: StatusAndHeaders | None
    payload: bytes


def served(body: bytes) -> Served:
    records = []
    for record in ArchiveIterator(io.BytesIO(body)):
        records.append(
            Served(
                record.rec_type,
                record.rec_headers.get_header("WARC-Target-URI"),
                record.rec_headers.get_header("WARC-Date"),
                record.http_headers,
                record.content_stream().read(),
            )
        )
    assert len(records) == 1
    return records[0]


# -- archives ----------------------------------------------------------------------


@dataclass(frozen=True)
class Made:
    """A request/response pair written into made.warc.gz."""

    method: str
    content_type: str | None
    body: bytes
    date: str  # WARC-Date

    @property
    def payload(self) -> bytes:
        return f"response to capture of {self.date}".encode()


BOUNDARY = "XyZzY"
MULTIPART = (
    f"--{BOUNDARY}\r\n"
    'Content-Disposition: form-data; name="title"\r\n\r\n'
    "hello world\r\n"
    f"--{BOUNDARY}\r\n"
    'Content-Disposition: form-data; name="upload"; filename="a.bin"\r\n'
    "Content-Type: application/octet-stream\r\n\r\n"
    "\x00\x01binary\r\n"
    f"--{BOUNDARY}--\r\n"
).encode("latin-1")
LONG_FORM = b"big=" + b"x" * 5000
MADE = (
    Made("GET", None, b"", "2020-01-01T00:00:00Z"),
    Made("POST", "application/json", b'{"q": "archives", "n": [1, 2], "o": {"deep": true}}',
         "2020-01-02T00:00:00Z"),
    Made("POST", f"multipart/form-data; boundary={BOUNDARY}", MULTIPART, "2020-01-03T00:00:00Z"),
    Made("POST", "application/octet-stream", b"\x00\xff\x10raw bytes", "2020-01-04T00:00:00Z"),
    Made("PUT", "text/plain", b"not json, just text", "2020-01-05T00:00:00Z"),
    Made("POST", FORM, LONG_FORM, "2020-01-06T00:00:00Z"),
    Made("POST", FORM, b"a=1&b=2", "2020-01-07T00:00:00Z"),
)  # fmt: skip
MADE_URL = "http://api.example/submit"


def _write_made(path: Path) -> None:
    """Response record, then its request record (WARC-Concurrent-To), per capture."""
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        for made in MADE:
            http = StatusAndHeaders(
                "200 OK",
                [("Content-Type", "text/plain"), ("Content-Length", str(len(made.payload)))],
                protocol="HTTP/1.1",
            )
            response = writer.create_warc_record(
                MADE_URL,
                "response",
                payload=io.BytesIO(made.payload),
                length=len(made.payload),  # known: warcio needs no spool file
                http_headers=http,
                warc_headers_dict={"WARC-Date": made.date},
            )
            headers = [("Host", "api.example")]
            if made.content_type:
                headers.append(("Content-Type", made.content_type))
            if made.body:
                headers.append(("Content-Length", str(len(made.body))))
            request = writer.create_warc_record(
                MADE_URL,
                "request",
                payload=io.BytesIO(made.body),
                length=len(made.body),
                http_headers=StatusAndHeaders(
                    f"{made.method} /submit HTTP/1.1", headers, is_http_request=True
                ),
                warc_headers_dict={
                    "WARC-Date": made.date,
                    "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID"),
                },
            )
            writer.write_record(response)
            writer.write_record(request)


@pytest.fixture(scope="session")
def archives(sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """post-test.cdxj (sorted, by the gateway's indexer) and made.warc.gz + made.cdxj."""
    folder = tmp_path_factory.mktemp("postreq")
    with (folder / "post-test.cdxj").open("w") as out:
        write_cdxj_index([sample_dir / "warcs" / "post-test.warc.gz"], out)
    _write_made(folder / "made.warc.gz")
    with (folder / "made.cdxj").open("w") as out:
        write_cdxj_index([folder / "made.warc.gz"], out)
    return folder


@dataclass
class Received:
    """One request as the stand-in live web saw it (raw header order and case)."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class LiveWeb:
    base: str
    received: list[Received]


@pytest.fixture
async def live_web() -> AsyncIterator[LiveWeb]:
    """Any method on any path: records the request, answers 200 ``echoed METHOD``."""
    state = LiveWeb("", [])

    async def echo(request: web.Request) -> web.Response:
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]
        body = await request.read()
        state.received.append(Received(request.method, request.path_qs, headers, body))
        return web.Response(body=b"echoed " + request.method.encode(), content_type="text/plain")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    state.base = f"http://127.0.0.1:{server.port}"
    try:
        yield state
    finally:
        await server.close()


@pytest.fixture
async def client(make_client: MakeClient, sample_dir: Path, archives: Path) -> Client:
    return await make_client(f"""
collections:
  post:
    index: {archives}/post-test.cdxj
    resource: {sample_dir}/warcs/
  made:
    index: {archives}/made.cdxj
    resource: {archives}/
  iana:
    index: {sample_dir}/cdxj/iana.cdxj
    resource: {sample_dir}/warcs/
  live:
    index: {{type: live, allow_private_networks: true}}
""")


# -- finding POST captures ---------------------------------------------------------------


@pytest.mark.parametrize("route", RESOURCE_ROUTES)
async def test_post_test_captures_are_found_by_their_bodies(client: Client, route: str) -> None:
    for target, body, timestamp, form in POST_TEST:
        resp = await client.post(
            f"/post/{route}",
            params={"url": f"http://httpbin.org{target}"},
            data=wrapped("POST", target, body),
        )
        assert resp.status == 200, await resp.text()
        assert CdxRecord.parse(resp.headers["Warcserver-Cdx"]).timestamp == timestamp
        record = served(await resp.read())
        assert record.rec_type == "response"
        assert record.target_uri == f"http://httpbin.org{target}"
        assert json.loads(record.payload)["form"] == form  # httpbin echoed that body


@pytest.mark.parametrize("route", INDEX_ROUTES)
async def test_index_routes_answer_the_method_keyed_lines(client: Client, route: str) -> None:
    for target, body, timestamp, _form in POST_TEST:
        resp = await client.post(
            f"/post/{route}",
            params={"url": f"http://httpbin.org{target}", "output": "json"},
            data=wrapped("POST", target, body),
        )
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/x-ndjson"
        rows = [json.loads(line) for line in (await resp.text()).splitlines()]
        assert [row["timestamp"] for row in rows] == [timestamp]
        assert rows[0]["urlkey"].startswith("org,httpbin)/post?__wb_method=post&")


async def test_url_comes_from_the_wrapped_request_when_not_given(client: Client) -> None:
    target, body, timestamp, _ = POST_TEST[2]
    for message in (
        wrapped("POST", target, body),  # origin form + Host
        wrapped("POST", f"http://httpbin.org{target}", body, host="ignored.example"),
    ):
        resp = await client.post("/post/resource-post", data=message)
        assert resp.status == 200, await resp.text()
        assert CdxRecord.parse(resp.headers["Warcserver-Cdx"]).timestamp == timestamp


async def test_a_direct_post_is_its_own_wrapped_request(client: Client) -> None:
    target, body, timestamp, form = POST_TEST[1]
    params = {"url": f"http://httpbin.org{target}"}
    headers = {"Content-Type": FORM}
    resp = await client.post("/post/resource", params=params, data=body, headers=headers)
    assert resp.status == 200, await resp.text()
    assert json.loads(served(await resp.read()).payload)["form"] == form
    resp = await client.post("/post/index", params=params, data=body, headers=headers)
    assert [line.split(" ")[1] for line in (await resp.text()).splitlines()] == [timestamp]


async def test_another_body_finds_nothing_exact_and_its_url_fuzzily(client: Client) -> None:
    # What pywb 2.10 answers for the same index (written by cdxj-indexer, so the
    # captures carry "method"): its generic fuzzy rule accepts a POST capture of
    # the same URL, or of the same URL with a query, whatever the body.
    message = wrapped("POST", "/post", b"foo=bar&test=xyz")
    params = {"url": "http://httpbin.org/post"}
    resp = await client.post("/post/index/postreq", params=params, data=message)
    found = [CdxRecord.parse(line) for line in (await resp.text()).splitlines()]
    assert [(r.timestamp, r.get("is_fuzzy")) for r in found] == [
        ("20140610001151", "1"),
        ("20140610001255", "1"),
        ("20140610000859", "1"),
    ]
    resp = await client.post("/post/resource/postreq", params=params, data=message)
    assert resp.status == 200, await resp.text()
    assert CdxRecord.parse(resp.headers["Warcserver-Cdx"]).get("is_fuzzy") == "1"

    params["allowFuzzy"] = "0"
    resp = await client.post("/post/resource/postreq", params=params, data=message)
    assert resp.status == 404
    assert "no captures of http://httpbin.org/post" in (await resp.json())["message"]


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_get_and_head_look_up_the_url_itself(client: Client, method: str) -> None:
    resp = await client.post(
        "/iana/resource/postreq",
        params={"url": "http://www.iana.org/"},
        data=wrapped(method, "/", host="www.iana.org"),
    )
    assert resp.status == 200, await resp.text()
    assert resp.headers["Warcserver-Cdx"].startswith("org,iana)/ 20140126200624 ")


@pytest.mark.parametrize("made", MADE, ids=lambda made: made.date[:10])
async def test_every_body_kind_is_found_as_cdxj_indexer_keyed_it(
    client: Client, made: Made
) -> None:
    message = wrapped(
        made.method, "/submit", made.body, host="api.example", content_type=made.content_type
    )
    # The long-form capture's CDXJ line (4 KiB urlkey, 5 KB requestBody) is past
    # aiohttp's 8190-byte header limit: Warcserver-Cdx leaves requestBody out.
    resp = await client.post("/made/resource/postreq", params={"url": MADE_URL}, data=message)
    assert resp.status == 200, await resp.text()
    assert len(resp.headers["Warcserver-Cdx"]) < 8190
    assert served(await resp.read()).payload == made.payload


async def test_lookup_keys_follow_cdxj_indexer(client: Client) -> None:
    lines = await client.get("/made/index", params={"url": MADE_URL, "matchType": "prefix"})
    keys = {CdxRecord.parse(line).urlkey for line in (await lines.text()).splitlines()}
    assert "example,api)/submit?__wb_method=post&a=1&b=2" in keys
    # JSON flattened by leaf name, repeated names numbered (cdxj-indexer json_parse)
    assert "example,api)/submit?__wb_method=post&deep=true&n=1&n.2_=2&q=archives" in keys
    assert "example,api)/submit?__wb_method=put&__wb_post_data=bm90igpzb24sigp1c3qgdgv4da==" in keys


async def test_bodies_are_cut_to_the_same_length_as_the_index_keys(client: Client) -> None:
    # cdxj-indexer keeps the first 4096 characters of the key's query: a body
    # that differs only after them finds the same capture, as in pywb.
    longer = LONG_FORM + b"&more=1"
    resp = await client.post(
        "/made/index/postreq",
        params={"url": MADE_URL, "output": "json"},
        data=wrapped("POST", "/submit", longer, host="api.example"),
    )
    assert resp.status == 200
    [row] = [json.loads(line) for line in (await resp.text()).splitlines()]
    assert row["timestamp"] == "20200106000000"
    assert row["urlkey"] == canonical_urlkey(f"{MADE_URL}?__wb_method=POST&big={'x' * 4092}")


async def test_json_with_another_value_finds_nothing_without_fuzzy_matching(
    client: Client,
) -> None:
    resp = await client.post(
        "/made/resource-post",
        params={"url": MADE_URL, "allowFuzzy": "false"},
        data=wrapped(
            "POST",
            "/submit",
            b'{"q": "archive", "n": [1, 2], "o": {"deep": true}}',
            host="api.example",
            content_type="application/json",
        ),
    )
    assert resp.status == 404


# -- the live web gets the wrapped request unaltered ------------------------------------


HOP_BY_HOP = (("Connection", "keep-alive, X-Hop"), ("Keep-Alive", "timeout=5"), ("X-Hop", "1"))


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
async def test_method_headers_and_body_reach_the_live_web_unaltered(
    client: Client, live_web: LiveWeb, method: str
) -> None:
    host = live_web.base.removeprefix("http://")
    body = b'{"k": "v"}' if method in ("POST", "PUT", "PATCH") else b""
    message = wrapped(
        method,
        "/echo/path?q=1",
        body,
        host=host,
        content_type="application/json",
        extra=(("X-Mixed-Case", "Kept As Sent"), ("x-lower", "lower"), *HOP_BY_HOP),
    )
    resp = await client.post(
        "/live/resource/postreq", params={"url": f"{live_web.base}/echo/path?q=1"}, data=message
    )
    assert resp.status == 200, await resp.text()
    [got] = live_web.received
    header_block = message.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    expected = [tuple(line.split(": ", 1)) for line in header_block]
    if method == "DELETE":
        # The one addition: aiohttp's client frames a body-less DELETE with
        # Content-Length: 0 (gateway.loaders.live adds Content-Length "when missing").
        expected.append(("Content-Length", "0"))
    assert got.method == method
    assert got.target == "/echo/path?q=1"
    assert got.headers == expected
    assert got.body == body
    record = served(await resp.read())
    assert record.http_headers is not None
    assert record.http_headers.get_statuscode() == "200"
    if method != "HEAD":
        assert record.payload == f"echoed {method}".encode()


@pytest.mark.parametrize(
    ("method", "body", "key_query"),
    [
        ("GET", b"", ""),
        ("HEAD", b"", ""),
        ("DELETE", b"", "?__wb_method=delete"),
        ("OPTIONS", b"", "?__wb_method=options"),
        ("POST", b"x=1&y=2", "?__wb_method=post&x=1&y=2"),
        ("PUT", b"x=1", "?__wb_method=put&x=1"),
    ],
)
async def test_live_lines_carry_the_lookup_key(
    client: Client, live_web: LiveWeb, method: str, body: bytes, key_query: str
) -> None:
    host = live_web.base.removeprefix("http://")
    resp = await client.post("/live/index/postreq", data=wrapped(method, "/echo", body, host=host))
    assert resp.status == 200
    [line] = (await resp.text()).splitlines()
    assert CdxRecord.parse(line).urlkey == canonical_urlkey(f"{live_web.base}/echo") + key_query
    assert live_web.received == []  # the Index API never fetches


async def test_chunked_wrapped_request_is_sent_chunked(client: Client, live_web: LiveWeb) -> None:
    host = live_web.base.removeprefix("http://")
    message = (
        f"POST /echo HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n"
        "X-After: 1\r\n\r\n"
        "5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"
    ).encode()
    resp = await client.post("/live/resource-post", data=message)
    assert resp.status == 200, await resp.text()
    [got] = live_web.received
    assert got.body == b"hello, world"
    assert ("Transfer-Encoding", "chunked") in got.headers
    assert [h for h in got.headers if h[0] != "Transfer-Encoding"] == [
        ("Host", host),
        ("X-After", "1"),
    ]


async def test_direct_post_sends_the_clients_own_request(client: Client, live_web: LiveWeb) -> None:
    resp = await client.post(
        "/live/resource",
        params={"url": f"{live_web.base}/echo"},
        data=b"direct=1",
        headers={"Content-Type": FORM, "X-Custom": "yes", "Connection": "keep-alive"},
    )
    assert resp.status == 200, await resp.text()
    [got] = live_web.received
    assert (got.method, got.body) == ("POST", b"direct=1")
    names = {name.lower() for name, _ in got.headers}
    assert ("X-Custom", "yes") in got.headers
    assert ("Content-Type", FORM) in got.headers
    assert "connection" not in names  # the hop to the gateway is not forwarded


# -- malformed wrapped requests -------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (b"", "empty"),
        (b"GET\r\n\r\n", "bad request line"),
        (b"GET /x\r\n\r\n", "bad request line"),
        (b"GET  /x HTTP/1.1\r\n\r\n", "bad request line"),
        (b"GET /x HTTP/1.1 extra\r\n\r\n", "bad request line"),
        (b"GET /x FTP/1.0\r\n\r\n", "bad request line"),
        (b"GET /x HTTP/1.1", "no request line"),
        (b"GET /x HTTP/1.1\r\nHost: a\r\n", "does not end with an empty line"),
        (b"GET /x HTTP/1.1\r\nHost a\r\n\r\n", "bad header line 1 'Host a': no colon"),
        (b"GET /x HTTP/1.1\r\nHost : a\r\n\r\n", "is not a header name"),
        (b"GET /x HTTP/1.1\r\nX: a\r\n b\r\n\r\n", "obsolete line folding"),
        (b"GET /x HTTP/1.1\r\nX: a\x00b\r\n\r\n", "control character"),
        (b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", "Content-Length mismatch"),
        (b"POST /x HTTP/1.1\r\nContent-Length: 1\r\n\r\nabc", "says 1 bytes but 3 bytes"),
        (b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "not a non-negative integer"),
        (b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "conflicting"),
        (b"POST /x HTTP/1.1\r\n\r\nbody", "no Content-Length"),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nxx", "not supported"),
        (
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
            "smuggling",
        ),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc\r\n", "cut short"),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd", "not followed by"),
        (b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", "ends before"),
        (
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nmore",
            "bytes follow the end",
        ),
    ],
)
async def test_malformed_wrapped_requests_are_400s_saying_what_is_wrong(
    client: Client, message: bytes, problem: str
) -> None:
    for route in ("resource/postreq", "index/postreq"):
        resp = await client.post(
            f"/post/{route}", params={"url": "http://a.example/"}, data=message
        )
        assert resp.status == 400
        body = await resp.json()
        assert body["param"] == "body"
        assert problem in body["message"]


async def test_no_url_anywhere_is_a_400_naming_url(client: Client) -> None:
    resp = await client.post("/post/resource-post", data=b"GET /x HTTP/1.1\r\n\r\n")
    assert resp.status == 400
    assert (await resp.json())["param"] == "url"


async def test_lenient_where_rfc_9112_allows(client: Client) -> None:
    target, body, timestamp, _ = POST_TEST[0]
    bare_lf = wrapped("POST", target, body).replace(b"\r\n", b"\n")
    for message in (bare_lf, b"\r\n" + wrapped("POST", target, body)):
        resp = await client.post("/post/resource-post", data=message)
        assert resp.status == 200, await resp.text()
        assert CdxRecord.parse(resp.headers["Warcserver-Cdx"]).timestamp == timestamp


async def test_other_methods_on_the_post_routes_are_405(client: Client) -> None:
    resp = await client.get("/post/resource/postreq", params={"url": "http://httpbin.org/post"})
    assert resp.status == 405
    assert "message" in await resp.json()


# -- through a remote CDX server --------------------------------------------------------


async def test_a_remote_cdx_server_is_asked_for_the_method_key(
    make_client: MakeClient, sample_dir: Path, archives: Path
) -> None:
    # The remote archive is a CDX server (a second gateway, pywb's dialect) over
    # the POST captures: it keys its lookups by the url it is sent, so the url
    # sent upstream must be the method-keyed one (pywb's alt_url).
    remote = TestServer(
        create_app(parse_config(f"collections:\n  post:\n    index: {archives}/post-test.cdxj\n")),
        host="127.0.0.1",
    )
    await remote.start_server()
    try:
        client = await make_client(
            f"collections:\n  far:\n    index: cdx+http://127.0.0.1:{remote.port}/post/index\n"
            f"    resource: {sample_dir}/warcs/\n"
        )
        for target, body, timestamp, form in POST_TEST:
            resp = await client.post(
                "/far/resource/postreq",
                params={"url": f"http://httpbin.org{target}"},
                data=wrapped("POST", target, body),
            )
            assert resp.status == 200, await resp.text()
            assert CdxRecord.parse(resp.headers["Warcserver-Cdx"]).timestamp == timestamp
            assert json.loads(served(await resp.read()).payload)["form"] == form
        other = await client.post(
            "/far/resource/postreq",
            params={"url": "http://httpbin.org/post"},
            data=wrapped("POST", "/post", b"foo=other"),
        )
        assert other.status == 404
    finally:
        await remote.close()


# -- pywb 2.10 answers the same -------------------------------------------------------


@pytest.mark.peer
async def test_pywb_serves_the_same_captures(client: Client, pywb_warcserver: str) -> None:
    async with aiohttp.ClientSession() as session:
        for target, body, timestamp, _form in POST_TEST:
            url = f"http://httpbin.org{target}"
            async with session.post(
                f"{pywb_warcserver}/pywb/resource/postreq",
                params={"url": url},
                data=wrapped("POST", target, body),
            ) as ref:
                assert ref.status == 200
                expected = served(await ref.read())
            resp = await client.post(
                "/post/resource/postreq", params={"url": url}, data=wrapped("POST", target, body)
            )
            got = served(await resp.read())
            assert (got.target_uri, got.warc_date, got.payload) == (
                expected.target_uri,
                expected.warc_date,
                expected.payload,
            )
            assert CdxRecord.parse(resp.headers["Warcserver-Cdx"]).timestamp == timestamp
