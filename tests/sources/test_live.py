"""``$live``: the live web as an index source, alone and through the API.

The live web is a stand-in aiohttp server on 127.0.0.1
(:mod:`tests.loaders.live_web`), so the collections that fetch from it set
``allow_private_networks: true``; ``$live`` itself refuses it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.cdx.memento import timestamp_to_http_date
from gateway.cdx.query import CaptureQuery, now_timestamp
from gateway.clients import SharedClients
from gateway.config import parse_config
from gateway.errors import ConfigError
from gateway.loaders.base import LoadContext
from gateway.loaders.live import DEFAULT_MAX_RECORD_BYTES, LiveLoader
from gateway.sources.live import LiveSource, LiveSourceConfig
from tests.conftest import MakeClient
from tests.loaders.live_web import (
    PAGE_BODY,
    LiveWeb,
    live_web,
    no_connections_except_loopback,
    parse_records,
    warcio_check,
)
from tests.sources.conftest import collect


@pytest.fixture
async def web() -> AsyncIterator[LiveWeb]:
    async with live_web() as server:
        yield server


async def no_original(url: str, timestamp: str, digest: str) -> AsyncIterator[CdxRecord]:
    return
    yield  # pragma: no cover


def source(**config: bool | int) -> LiveSource:
    return LiveSource(LiveSourceConfig(**config), name="live", clients=SharedClients())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the index
@pytest.mark.parametrize(
    ("asked", "url"),
    [
        ("http://example.com/a?b=1", "http://example.com/a?b=1"),
        ("https://example.com/", "https://example.com/"),
        ("example.com/page", "http://example.com/page"),
    ],
)
async def test_an_exact_lookup_is_one_capture_now(asked: str, url: str) -> None:
    live = source()
    query = CaptureQuery.for_url(asked)
    before = now_timestamp()
    [record] = await collect(live, query)
    after = now_timestamp()
    assert record.urlkey == query.key == canonical_urlkey(url)
    assert before <= record.timestamp <= after
    assert record.fields == {"url": url, "load_url": url, "is_live": "true"}
    assert query.key <= record.urlkey
    assert f"{record.urlkey} {record.timestamp}" < query.end_key
    await live.aclose()


@pytest.mark.parametrize("match_type", ["prefix", "host", "domain"])
async def test_non_exact_lookups_yield_nothing(match_type: str) -> None:
    query = CaptureQuery.for_url("http://example.com/", match_type=match_type)  # type: ignore[arg-type]
    assert await collect(source(), query) == []


async def test_a_widened_fuzzy_lookup_yields_nothing_even_when_exact() -> None:
    # As pywb's LiveIndexSource: the live web would "find" any URL a rule makes.
    query = CaptureQuery.for_url("http://example.com/a")
    assert len(await collect(source(), query)) == 1
    assert await collect(source(), query.evolve(fuzzy=True)) == []


@pytest.mark.parametrize("url", ["ftp://example.com/file", "file:///etc/passwd"])
async def test_non_http_urls_yield_nothing(url: str) -> None:
    assert await collect(source(), CaptureQuery.for_url(url)) == []


async def test_an_empty_key_range_yields_nothing() -> None:
    query = CaptureQuery(url="http://example.com/", key="com,example)/", end_key="com,example)/")
    assert await collect(source(), query) == []


def test_its_loader_is_bound_to_its_name_and_settings() -> None:
    live = source(allow_private_networks=True, max_record_bytes=1234)
    [loader] = live.resource_loaders()
    assert isinstance(loader, LiveLoader)
    assert (loader.name, loader.allow_private_networks, loader.max_record_bytes) == (
        "live",
        True,
        1234,
    )
    record = CdxRecord("com,example)/", now_timestamp(), {"url": "http://example.com/"})
    record.fields.update({"load_url": "http://example.com/", "is_live": "true"})
    record.fields["source-coll"] = "live"
    assert loader.accepts(record)
    record.fields["source-coll"] = "other"
    assert not loader.accepts(record)
    assert "\n" not in live.describe()


async def test_aclose_closes_the_fetch_session(web: LiveWeb) -> None:
    live = source(allow_private_networks=True)
    [loader] = live.resource_loaders()
    assert isinstance(loader, LiveLoader)
    [capture] = await collect(live, CaptureQuery.for_url(web.url("/page")))
    capture.fields["source-coll"] = "live"
    loaded = await loader.load(
        capture, LoadContext(request_url=web.url("/page"), find_original=no_original)
    )
    await loaded.aclose()
    session = loader._session
    assert session is not None
    assert not session.closed
    await live.aclose()
    assert session.closed


# --------------------------------------------------------------------------- config
def test_config_forms() -> None:
    config = parse_config(
        """
collections:
  short: $live
  typed:
    index: {type: live, allow_private_networks: true, max_record_bytes: 2048}
  group:
    index_group:
      web: $live
"""
    )
    [(_, short)] = config.collections["short"].steps[0].members
    assert short.type == "live"
    assert short.config == LiveSourceConfig()
    assert short.config.max_record_bytes == DEFAULT_MAX_RECORD_BYTES == 100 * 1024 * 1024
    assert short.config.allow_private_networks is False
    [(_, typed)] = config.collections["typed"].steps[0].members
    assert typed.config == LiveSourceConfig(allow_private_networks=True, max_record_bytes=2048)
    [(name, member)] = config.collections["group"].steps[0].members
    assert (name, member.type) == ("web", "live")


@pytest.mark.parametrize(
    ("value", "path", "problem"),
    [
        ("$lives", "collections.c", "is not the live web; expected '$live'"),
        ("$livE", "collections.c", "unknown source '$livE'; expected a file or directory"),
        ("{index: {type: live, max_record_bytes: 0}}", "collections.c.index", "positive"),
        (
            "{index: {type: live, allow_private_networks: 'yes'}}",
            "collections.c.index.allow_private_networks",
            "expected true or false",
        ),
        (
            "{index: {type: live, timeout: 3}}",
            "collections.c.index.timeout",
            "unknown key; expected one of allow_private_networks, max_record_bytes",
        ),
    ],
)
def test_config_errors_name_the_yaml_path(value: str, path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"collections:\n  c: {value}\n")
    assert caught.value.path == path
    assert problem in caught.value.problem


# --------------------------------------------------------------------------- the API
def allowed_yaml(max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> str:
    return f"""
collections:
  live:
    index: {{type: live, allow_private_networks: true, max_record_bytes: {max_record_bytes}}}
"""


async def test_index_api_lists_the_live_capture_without_fetching(
    web: LiveWeb, make_client: MakeClient
) -> None:
    client = await make_client(allowed_yaml())
    url = web.url("/page")
    response = await client.get("/live/index", params={"url": url, "output": "json"})
    assert response.status == 200
    [line] = (await response.text()).splitlines()
    fields = json.loads(line)
    assert fields["url"] == fields["load_url"] == url
    assert fields["is_live"] == "true"
    assert fields["source"] == fields["source-coll"] == "live"
    assert web.hits["/page"] == 0
    prefix = await client.get("/live/index", params={"url": url + "*"})
    assert prefix.status == 200
    assert await prefix.text() == ""


async def test_resource_api_serves_the_live_page(
    web: LiveWeb, make_client: MakeClient, tmp_path: Path
) -> None:
    client = await make_client(allowed_yaml())
    url = web.url("/page")
    response = await client.get("/live/resource", params={"url": url})
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/warc-record"
    data = await response.read()
    assert int(response.headers["Content-Length"]) == len(data)
    assert response.headers["WARC-Target-URI"] == url
    cdx = CdxRecord.parse(response.headers["Warcserver-Cdx"])
    assert cdx.fields["is_live"] == "true"
    [record] = parse_records(data + b"\r\n\r\n")
    assert record.payload == PAGE_BODY
    # Memento-Datetime and the served capture's timestamp are the fetch time.
    assert response.headers["Memento-Datetime"] == timestamp_to_http_date(cdx.timestamp)
    warcio_check([data], tmp_path)
    assert web.hits["/page"] == 1


async def test_resource_api_serves_a_redirect_as_is(web: LiveWeb, make_client: MakeClient) -> None:
    client = await make_client(allowed_yaml())
    response = await client.get("/live/resource", params={"url": web.url("/redirect")})
    assert response.status == 200
    [record] = parse_records(await response.read() + b"\r\n\r\n")
    assert record.http_status_line == "HTTP/1.1 302 Found"
    assert web.hits["/page"] == 0


async def test_resource_api_reports_a_record_too_large(
    web: LiveWeb, make_client: MakeClient
) -> None:
    client = await make_client(allowed_yaml(max_record_bytes=4096))
    url = web.url("/big?size=1000000")
    response = await client.get("/live/resource", params={"url": url})
    assert response.status == 404
    body = await response.json()
    [reason] = body["errors"].values()
    assert f"live response for {url} exceeds max_record_bytes=4096" in reason
    assert "collections.yaml" in reason


async def test_resource_post_sends_the_wrapped_request(
    web: LiveWeb, make_client: MakeClient
) -> None:
    client = await make_client(allowed_yaml())
    url = web.url("/echo")
    host = url.removeprefix("http://").split("/")[0]
    wrapped = (
        f"POST /echo HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive\r\n"
        "X-Mixed-CASE: v\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        "Content-Length: 7\r\n\r\na=1&b=2"
    ).encode()
    response = await client.post("/live/resource-post", params={"url": url}, data=wrapped)
    assert response.status == 200
    [record] = parse_records(await response.read() + b"\r\n\r\n")
    echoed = json.loads(record.payload)
    assert echoed["method"] == "POST"
    assert echoed["body"] == "a=1&b=2"
    assert [tuple(pair) for pair in echoed["headers"]] == [
        ("Host", host),
        ("Connection", "keep-alive"),
        ("X-Mixed-CASE", "v"),
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Content-Length", "7"),
    ]


async def test_sequence_falls_back_to_the_live_web(
    web: LiveWeb, make_client: MakeClient, sample_dir: Path
) -> None:
    client = await make_client(
        f"""
collections:
  fallback:
    sequence:
      - name: archive
        index: {sample_dir}/cdxj/iana.cdxj
        resource: {sample_dir}/warcs/
      - name: web
        index: {{type: live, allow_private_networks: true}}
"""
    )
    archived = await client.get("/fallback/resource", params={"url": "http://www.iana.org/"})
    assert archived.status == 200
    assert archived.headers["Warcserver-Step"] == "archive"
    await archived.read()
    live = await client.get("/fallback/resource", params={"url": web.url("/page")})
    assert live.status == 200
    assert live.headers["Warcserver-Step"] == "web"
    await live.read()
    assert web.hits["/page"] == 1


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("LOOPBACK", "loopback"),
        ("http://localhost:{port}/page", "loopback"),
        ("http://10.0.0.1/", "private network"),
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata endpoint"),
    ],
)
async def test_default_live_refuses_private_destinations(
    web: LiveWeb, make_client: MakeClient, target: str, reason: str
) -> None:
    port = web.base.rsplit(":", 1)[1]
    url = web.url("/page") if target == "LOOPBACK" else target.format(port=port)
    client = await make_client("collections:\n  live: $live\n")
    with no_connections_except_loopback() as attempts:
        response = await client.get("/live/resource", params={"url": url})
        body = await response.json()
    # the only connection is the test client's own, to the gateway
    assert attempts == [("127.0.0.1", client.server.port)]
    assert response.status == 404
    [message] = body["errors"].values()
    assert reason in message
    assert "allow_private_networks: true" in message
    assert web.hits["/page"] == 0
