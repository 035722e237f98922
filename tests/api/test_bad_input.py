"""No 5xx for anything a client can send: each case a JSON 4xx naming what was wrong.

Every source type is configured (local file and directory, ZipNum, Redis,
remote CDX and Memento servers, the live web, the snapshot store): a URL
that cannot be parsed is refused before any of them is asked, so the remote
ones point at a closed port and nothing is sent. Each answer must be JSON
with the CORS headers, and nothing may be logged at ERROR.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.conftest import MakeClient, free_port

Client = TestClient[web.Request, web.Application]

SOURCES = ("file", "dir", "zip", "redis", "cdx", "memento", "live", "store")
BAD_URLS = [
    "[",
    "http://[::1",
    "http://a..b/",
    "http://" + "a" * 64 + ".com/",
    "http://example.com:\uff18\uff10/",  # full-width digits in the port
    "http://example.com:99999/",
    "http://\u2488.com/",  # ⒈: IDNA refuses it (it crashed the $live fetch: a 500)
    "http://xn---bbk.com/",  # a fake A-label
    "http://a\u200db.com/",  # a joiner outside its context
]


@pytest.fixture
async def client(make_client: MakeClient, sample_dir: Path, tmp_path: Path) -> Client:
    closed = f"127.0.0.1:{free_port()}"
    s = sample_dir
    return await make_client(f"""
store:
  root: {tmp_path / "store"}
  fsync: never
collections:
  file: {{index: {s}/cdxj/iana.cdxj, resource: {s}/warcs/}}
  dir: {{index: {s}/cdxj/, resource: {s}/warcs/}}
  zip: {{index: {s}/zipcdx/zipnum-sample.idx, resource: {s}/warcs/}}
  redis: redis://{closed}/0/pywb:cdxj
  cdx: cdx+http://{closed}/pywb/cdx
  memento: memento+http://{closed}/pywb/
  live: $live
  store: $store
""")


async def _expect(
    client: Client, method: str, target: str, status: int, param: str | None, **kwargs: object
) -> dict[str, object]:
    resp = await client.request(method, target, **kwargs)  # type: ignore[arg-type]
    body = await resp.json()
    assert resp.status == status, (target, resp.status, body)
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert isinstance(body["message"], str)
    if param is not None:
        assert body.get("param") == param, (target, body)
    return dict(body)


@pytest.fixture(autouse=True)
def _no_errors_logged(caplog: pytest.LogCaptureFixture) -> object:
    caplog.set_level(logging.DEBUG)
    yield
    errors = [r.getMessage()[:200] for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors


@pytest.mark.parametrize("name", ["limit", "offset", "page", "pageSize"])
async def test_integers_past_64_bits_are_a_400(client: Client, name: str) -> None:
    for value in ("9223372036854775808", "-9223372036854775809", "9" * 400, "١٢", "1_0", " 5"):
        await _expect(client, "GET", "/dir/cdx", 400, name, params={"url": "iana.org", name: value})
    if name == "limit":
        await _expect(
            client,
            "GET",
            "/dir/index",
            400,
            "limit",
            params={"url": "iana.org", name: "9" * 19 + "0"},
        )


async def test_the_largest_integers_are_answered(client: Client) -> None:
    big = "9223372036854775807"
    for params in (
        {"url": "iana.org", "limit": big},
        {"url": "iana.org", "offset": big},
        {"url": "iana.org", "page": big, "pageSize": "100000"},
        {"url": "iana.org", "page": big, "showNumPages": "true"},
    ):
        resp = await client.get("/dir/cdx", params=params)
        assert resp.status == 200, (params, await resp.text())
    resp = await client.get("/dir/index", params={"url": "iana.org", "limit": big})
    assert resp.status == 200
    assert (await resp.text()).count("\n") == 3


async def test_a_repeat_count_past_re2s_limit_is_a_400(client: Client) -> None:
    await _expect(
        client,
        "GET",
        "/dir/index",
        400,
        "filter",
        params={"url": "iana.org", "filter": "~url:x{99999999999}"},
    )
    await _expect(
        client,
        "GET",
        "/dir/cdx",
        400,
        "filter",
        params={"url": "iana.org", "filter": "original:x{99999999999}"},
    )


@pytest.mark.parametrize(
    "target",
    ["/dir/index", "/dir/resource", "/dir/resource-post", "/dir/index/postreq"],
)
async def test_a_malformed_multipart_body_is_a_400_naming_the_body(
    client: Client, target: str
) -> None:
    body = b'{"a": 1}'
    url = "http://httpbin.org/post"
    if "postreq" in target or "post" in target.rsplit("/", 1)[-1]:
        head = (
            f"POST /post HTTP/1.1\r\nHost: httpbin.org\r\n"
            f"Content-Type: multipart/form-data; boundary=Q\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        await _expect(
            client, "POST", target, 400, "body", params={"url": url}, data=head.encode() + body
        )
    else:
        await _expect(
            client,
            "POST",
            target,
            400,
            "body",
            params={"url": url},
            data=body,
            headers={"Content-Type": "multipart/form-data; boundary=Q"},
        )


async def test_an_unparseable_json_body_is_not_echoed_to_the_log(
    client: Client, capfd: pytest.CaptureFixture[str]
) -> None:
    secret = "never-in-the-log-" + "x" * 5000
    resp = await client.post(
        "/dir/index",
        params={"url": "http://httpbin.org/post"},
        data=('{"a": "' + secret).encode(),
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 200
    out, err = capfd.readouterr()
    assert "never-in-the-log" not in out + err


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("url", BAD_URLS)
async def test_an_unparseable_url_is_a_400_on_every_source_type(
    client: Client, source: str, url: str
) -> None:
    for route in ("index", "resource", "cdx"):
        body = await _expect(client, "GET", f"/{source}/{route}", 400, "url", params={"url": url})
        assert "cannot parse URL" in str(body["message"])
    for route in ("timegate", "timemap/link", "20140126200624id_"):
        await _expect(client, "GET", f"/{source}/{route}/{url}", 400, "url")


async def test_a_post_request_for_an_unparseable_url_is_a_400(client: Client) -> None:
    wrapped = b"GET / HTTP/1.1\r\nHost: a..b\r\n\r\n"
    await _expect(client, "POST", "/live/resource/postreq", 400, "url", data=wrapped)


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"from": "\u0662\u0660\u0661\u0664"}, "from"),
        ({"to": "\uff12\uff10\uff11\uff14"}, "to"),
        ({"closest": "\u0662\u0660\u0661\u0664"}, "closest"),
    ],
)
async def test_timestamps_of_other_scripts_digits_are_a_400(
    client: Client, params: dict[str, str], param: str
) -> None:
    for route in ("index", "resource"):
        await _expect(
            client, "GET", f"/dir/{route}", 400, param, params={"url": "iana.org", **params}
        )
    if param != "closest":
        await _expect(client, "GET", "/dir/cdx", 400, param, params={"url": "iana.org", **params})


async def test_a_memento_timestamp_of_other_scripts_digits_is_a_400(client: Client) -> None:
    await _expect(
        client, "GET", "/dir/%D9%A2%D9%A0%D9%A1%D9%A4id_/http://example.com/", 400, "timestamp"
    )


@pytest.mark.parametrize(
    "path",
    [
        "/dir/timegate/%0A",
        "/dir/timemap/link/%0A",
        "/dir/20140126id_/%0A",
        "/nope/%0A",
        "/dir/%0A/index",
        "/%0A",
    ],
)
async def test_paths_with_an_encoded_newline_get_a_json_answer(client: Client, path: str) -> None:
    resp = await client.get(path)
    assert resp.status in (400, 404), path
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert "message" in await resp.json()


async def test_memento_routes_take_percent_encoded_ipv6_brackets(client: Client) -> None:
    for path in ("/dir/timegate/http://%5B::1%5D/", "/dir/timemap/link/http://%5b::1%5d:8080/"):
        body = await _expect(client, "GET", path, 404, None)
        assert "[::1]" in str(body["message"])
