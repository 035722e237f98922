"""CdxApiSource against real servers: an aiohttp CDX server in every answer format,
failing servers, and pywb 2.10's wayback (``/pywb/cdx`` and ``id_`` mementos)."""

from __future__ import annotations

import asyncio
import doctest
import io
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from warcio.archiveiterator import ArchiveIterator

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery, parse_query
from gateway.clients import SharedClients
from gateway.config import parse_config
from gateway.errors import ConfigError, SourceBadAnswer, SourceRefused, SourceUnavailable
from gateway.loaders.replay import ReplayLoader
from gateway.server.app import create_app
from gateway.sources import cdx_api, cdx_stream
from gateway.sources.cdx_api import CdxApiConfig, CdxApiSource, fill_replay_template
from tests.conftest import free_port
from tests.sources.cdx_support import FORMATS, RELEASE, REQUESTS, cdx_server_app
from tests.sources.conftest import collect, linear_scan

AiohttpServer = Callable[..., Awaitable[TestServer]]
AiohttpClient = Callable[..., Awaitable[TestClient]]  # type: ignore[type-arg]

URLS = (
    "http://www.iana.org/",
    "http://www.iana.org/_css/2013.1/screen.css",
    "http://www.iana.org/_js/2013.1/iana.js",
    "http://www.iana.org/domains/root/db",
    "http://www.iana.org/not/archived",
)


def identity(records: list[CdxRecord]) -> Counter[tuple[str, str, str, str]]:
    return Counter((r.urlkey, r.timestamp, r.url, r.digest) for r in records)


@pytest.fixture(scope="session")
def iana_path(sample_dir: Path) -> Path:
    return sample_dir / "cdxj" / "iana.cdxj"


@pytest.fixture(scope="session")
def iana_lines(iana_path: Path) -> list[bytes]:
    return iana_path.read_bytes().splitlines()


@pytest.fixture
async def cdx_server(aiohttp_server: AiohttpServer, iana_lines: list[bytes]) -> TestServer:
    return await aiohttp_server(cdx_server_app(iana_lines))


def source_for(
    server: TestServer, path: str, clients: SharedClients, **options: Any
) -> CdxApiSource:
    config = CdxApiConfig(api_url=str(server.make_url(path)), **options)
    return CdxApiSource(config, name="remote", clients=clients)


# ------------------------------------------------------------------ answers
@pytest.mark.parametrize("fmt", FORMATS)
async def test_every_answer_format_gives_the_captures_of_a_linear_scan(
    fmt: str, cdx_server: TestServer, clients: SharedClients, iana_path: Path
) -> None:
    source = source_for(cdx_server, f"/{fmt}/cdx", clients)
    queries = [CaptureQuery.for_url(url) for url in URLS]
    queries.append(CaptureQuery.for_url("http://www.iana.org/_css/", match_type="prefix"))
    queries.append(CaptureQuery.for_url("iana.org", match_type="domain"))
    total = 0
    for query in queries:
        got = await collect(source, query)
        assert identity(got) == identity(linear_scan(iana_path, query)), query.url
        assert [r.sort_key() for r in got] == sorted(r.sort_key() for r in got)
        for record in got:
            replay = str(cdx_server.make_url(f"/{fmt}/{record.timestamp}id_/{record.url}"))
            assert record.fields["load_url"] == replay
        total += len(got)
    assert total > 171  # the domain query alone returns every line


async def test_ia_json_fields_get_cdxj_names(
    cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, "/iajson/cdx", clients)
    [first, *_] = await collect(source, CaptureQuery.for_url("http://www.iana.org/"))
    assert first.fields["url"] == "http://www.iana.org/"
    assert first.fields["mime"] == "text/html"
    assert first.fields["status"] == "200"
    assert "original" not in first.fields


async def test_ia_json_stops_at_the_resume_key(
    cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, "/resume/cdx", clients)
    got = await collect(source, CaptureQuery.for_url("http://www.iana.org/"))
    assert [(r.timestamp, r.status) for r in got] == [
        ("20140126200624", "200"),
        ("20140127171238", "302"),
    ]


@pytest.mark.parametrize("fmt", ["cdxj", "iajson", "ndjson"])
async def test_records_are_yielded_while_the_answer_streams_in(
    fmt: str, cdx_server: TestServer, clients: SharedClients, iana_path: Path
) -> None:
    # The server sends one record, then waits until the test has received it.
    source = source_for(cdx_server, f"/slow/{fmt}/cdx", clients)
    query = CaptureQuery.for_url("http://www.iana.org/_css/2013.1/screen.css")
    stream = source.lookup(query)
    first = await asyncio.wait_for(anext(stream), timeout=20)
    cdx_server.app[RELEASE].set()
    rest = [record async for record in stream]
    assert identity([first, *rest]) == identity(linear_scan(iana_path, query))
    assert len(rest) >= 10


# ------------------------------------------------------------ query parameters
async def test_query_parameters_are_passed_through(
    cdx_server: TestServer, clients: SharedClients, iana_path: Path
) -> None:
    source = source_for(cdx_server, "/cdxj/cdx?output=cdxj", clients, closest_limit=3)
    url = "http://www.iana.org/_css/2013.1/screen.css"
    requests = cdx_server.app[REQUESTS]

    closest = parse_query({"url": [url], "closest": ["20140126201000"]})
    got = await collect(source, closest)
    assert requests[-1] == {
        "output": "cdxj",
        "url": url,
        "matchType": "exact",
        "closest": "20140126201000",
        "sort": "closest",
        "limit": "3",
    }
    everything = linear_scan(iana_path, closest)
    by_distance = sorted(everything, key=lambda r: abs(int(r.timestamp) - 20140126201000))
    assert [r.timestamp for r in got] == sorted(r.timestamp for r in by_distance[:3])

    reverse = parse_query({"url": [url], "sort": ["reverse"], "limit": ["2"]})
    got = await collect(source, reverse)
    assert requests[-1]["sort"] == "reverse"
    assert requests[-1]["limit"] == "2"
    assert [r.timestamp for r in got] == [r.timestamp for r in everything[-2:]]

    ranged = parse_query({"url": ["iana.org/_css/*"], "from": ["2014012620"], "to": ["2014"]})
    await collect(source, ranged)
    assert requests[-1] == {
        "output": "cdxj",
        "url": "iana.org/_css/",
        "matchType": "prefix",
        "from": "20140126200000",
        "to": "20141231235959",
        "limit": "100000",
    }

    filtered = parse_query({"url": [url], "filter": ["!mime:warc/revisit"], "limit": ["1"]})
    await collect(source, filtered)
    assert "limit" not in requests[-1]  # a limit upstream would cut before the filter
    assert "sort" not in requests[-1]


async def test_an_empty_key_range_sends_no_request(
    cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, "/cdxj/cdx", clients)
    assert await collect(source, CaptureQuery(url="-", key="b", end_key="a")) == []
    assert cdx_server.app[REQUESTS] == []


# --------------------------------------------------------------------- errors
async def test_503_is_unavailable_with_retry_after(
    cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, "/unavailable/cdx", clients)
    with pytest.raises(SourceUnavailable) as caught:
        await collect(source, CaptureQuery.for_url("http://www.iana.org/"))
    assert caught.value.reason == f"HTTP 503 from {source.config.api_url}"
    assert caught.value.retry_after_s == 7.0
    assert caught.value.source == "remote"


async def test_429_retry_after_may_be_an_http_date(
    cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, "/throttled/cdx", clients)
    with pytest.raises(SourceUnavailable) as caught:
        await collect(source, CaptureQuery.for_url("http://www.iana.org/"))
    assert caught.value.retry_after_s is not None
    assert caught.value.retry_after_s > 365 * 24 * 3600


async def test_502_is_unavailable_without_retry_after(
    cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, "/bad-gateway/cdx", clients)
    with pytest.raises(SourceUnavailable) as caught:
        await collect(source, CaptureQuery.for_url("http://www.iana.org/"))
    assert caught.value.reason == f"HTTP 502 from {source.config.api_url}"
    assert caught.value.retry_after_s is None


async def test_404_means_no_captures(cdx_server: TestServer, clients: SharedClients) -> None:
    source = source_for(cdx_server, "/missing/cdx", clients)
    assert await collect(source, CaptureQuery.for_url("http://www.iana.org/")) == []


async def test_a_400_about_the_query_is_the_clients_error(
    cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, "/refusing/cdx", clients)
    with pytest.raises(SourceRefused) as caught:
        await collect(source, CaptureQuery.for_url("http://example.com/<script>"))
    assert caught.value.status == 400
    assert caught.value.source == "remote"
    assert caught.value.reason == (
        f"the archive refused the query: CDX server {source.config.api_url} answered "
        "HTTP 400 Bad Request (org.archive.wayback.exception.BadQueryException: "
        "Invalid URL: http://example.com/<script>)"
    )


async def test_a_401_is_a_fault_of_the_source(
    cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, "/unauthorized/cdx", clients)
    with pytest.raises(SourceUnavailable, match="HTTP 401"):
        await collect(source, CaptureQuery.for_url("http://www.iana.org/"))


async def test_connection_refused_is_unavailable(clients: SharedClients) -> None:
    config = CdxApiConfig.from_shorthand(f"cdx+http://127.0.0.1:{free_port()}/cdx")
    source = CdxApiSource(config, name="down", clients=clients)
    with pytest.raises(SourceUnavailable) as caught:
        await collect(source, CaptureQuery.for_url("http://www.iana.org/"))
    assert "cannot read" in caught.value.reason


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("/garbage/cdx", "line 1"),
        ("/truncated/cdx", "truncated"),
        ("/long-line/cdx", "longer than"),
    ],
)
async def test_unparseable_answers_are_bad_answers(
    path: str, words: str, cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, path, clients)
    with pytest.raises(SourceBadAnswer) as caught:
        await collect(source, CaptureQuery.for_url("http://www.iana.org/"))
    assert words in caught.value.reason
    assert source.config.api_url in caught.value.reason


# --------------------------------------------------------------------- config
@pytest.mark.parametrize("module", [cdx_api, cdx_stream])
def test_the_module_doctests_pass(module: ModuleType) -> None:
    result = doctest.testmod(module)
    assert result.failed == 0
    assert result.attempted >= 2


def test_shorthand_forms_as_in_pywb() -> None:
    config = parse_config(
        "collections:\n"
        "  a: cdx+http://h/pywb/cdx\n"
        "  b: cdxj+http://h/pywb-cdx\n"
        "  c: 'cdx+http://h/cdx /web'\n"
        "  d: cdx+https://web.archive.org/cdx/search/cdx;https://web.archive.org/web/\n"
        "  e:\n"
        "    index: {type: cdx, api_url: 'http://h/cdx', replay_url: 'http://r/x?t={timestamp}&u={url}'}\n"
    )
    templates = {
        name: coll.steps[0].members[0][1].config.replay_template
        for name, coll in config.collections.items()
    }
    assert templates == {
        "a": "http://h/pywb/{timestamp}id_/{url}",
        "b": "http://h/pywb/{timestamp}id_/{url}",
        "c": "http://h/web/{timestamp}id_/{url}",
        "d": "https://web.archive.org/web/{timestamp}id_/{url}",
        "e": "http://r/x?t={timestamp}&u={url}",
    }
    assert all(c.steps[0].members[0][1].type == "cdx" for c in config.collections.values())


@pytest.mark.parametrize(
    ("yaml_value", "words"),
    [
        ("cdx+ftp://h/cdx", "not an http(s) URL"),
        (
            "{type: cdx, api_url: 'http://h/cdx', replay_url: 'http://r/{ts}/{url}'}",
            "{url} and {timestamp}",
        ),
        ("{type: cdx, api_url: 'http://h/cdx', closest_limit: 0}", "closest_limit"),
        ("{type: cdx}", "api_url: missing required key"),
    ],
)
def test_bad_configs_name_the_yaml_path(yaml_value: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"collections:\n  bad:\n    index: {yaml_value}\n")
    assert caught.value.path.startswith("collections.bad.index")
    assert words in caught.value.message


def test_replay_template_quotes_the_url_in_a_query_string() -> None:
    assert fill_replay_template("http://r/x?u={url}&t={timestamp}", "http://a/?b=1&c", "2014") == (
        "http://r/x?u=http%3A//a/%3Fb%3D1%26c&t=2014"
    )
    assert fill_replay_template("http://r/{timestamp}id_/{url}", "http://a/?b=1&c", "2014") == (
        "http://r/2014id_/http://a/?b=1&c"
    )


async def test_resource_loaders_load_only_this_sources_captures(
    cdx_server: TestServer, clients: SharedClients
) -> None:
    source = source_for(cdx_server, "/cdxj/cdx", clients)
    [loader] = source.resource_loaders()
    assert isinstance(loader, ReplayLoader)
    [record, *_] = await collect(source, CaptureQuery.for_url("http://www.iana.org/"))
    assert not loader.accepts(record)  # the aggregator sets source-coll
    record.fields["source-coll"] = "remote"
    assert loader.accepts(record)
    record.fields["source-coll"] = "other"
    assert not loader.accepts(record)
    assert "\n" not in source.describe()


# ------------------------------------------------------ through the gateway APIs
QUERIES = (
    {"url": "http://www.iana.org/_css/2013.1/screen.css"},
    {"url": "http://www.iana.org/_css/2013.1/screen.css", "closest": "20140126201000"},
    {"url": "http://www.iana.org/_css/2013.1/screen.css", "sort": "reverse", "limit": "3"},
    {"url": "http://www.iana.org/_css/2013.1/screen.css", "limit": "2"},
    {
        "url": "http://www.iana.org/_css/2013.1/screen.css",
        "from": "201401262010",
        "to": "2014012620",
    },
    {"url": "http://www.iana.org/_css/2013.1/screen.css", "filter": "!mime:warc/revisit"},
    {
        "url": "http://www.iana.org/_js/2013.1/iana.js",
        "filter": "=status:200",
        "closest": "20140127",
    },
    {"url": "iana.org/_css/*"},
    {"url": "*.iana.org", "limit": "50"},
    {"url": "*.iana.org", "sort": "reverse", "limit": "7"},
)


async def index_lines(client: TestClient, coll: str, params: dict[str, str]) -> list[str]:  # type: ignore[type-arg]
    fields = {"fl": "urlkey,timestamp,url,digest", "output": "json"}
    response = await client.get(f"/{coll}/index", params={**params, **fields})
    assert response.status == 200, await response.text()
    return (await response.text()).splitlines()


@pytest.mark.parametrize("fmt", ["cdxj", "iajson"])
async def test_index_api_answers_as_the_local_file(
    fmt: str, cdx_server: TestServer, aiohttp_client: AiohttpClient, iana_path: Path
) -> None:
    yaml_text = (
        f"collections:\n  local: {iana_path}\n  remote: cdx+{cdx_server.make_url(f'/{fmt}/cdx')}\n"
    )
    client = await aiohttp_client(create_app(parse_config(yaml_text)))
    for params in QUERIES:
        local = await index_lines(client, "local", params)
        assert local, params
        assert await index_lines(client, "remote", params) == local, params


async def test_index_api_reports_a_down_archive_as_503(
    cdx_server: TestServer, aiohttp_client: AiohttpClient
) -> None:
    yaml_text = f"collections:\n  remote: cdx+{cdx_server.make_url('/unavailable/cdx')}\n"
    client = await aiohttp_client(create_app(parse_config(yaml_text)))
    response = await client.get("/remote/index", params={"url": "http://www.iana.org/"})
    assert response.status == 503
    body = await response.json()
    assert body["errors"] == {"remote": f"HTTP 503 from {cdx_server.make_url('/unavailable/cdx')}"}


# ----------------------------------------------------------------- real pywb
PEER_URLS = (
    "http://www.iana.org/",
    "http://www.iana.org/_css/2013.1/screen.css",
    "http://www.iana.org/_js/2013.1/jquery.js",
    "http://www.iana.org/_img/2013.1/iana-logo-header.svg",
    "http://www.iana.org/about/performance/ietf-statistics",
    "http://www.iana.org/domains/root/servers",
)


def split_record(data: bytes) -> tuple[Any, bytes]:
    """warcio's view of one served record: (record headers, raw payload bytes)."""
    records = ArchiveIterator(io.BytesIO(data + b"\r\n\r\n"))
    record = next(records)
    payload = record.raw_stream.read()
    return record, payload


def warcio_check(path: Path) -> str:
    """``warcio check -v`` on ``path``; fails the test on a non-zero exit."""
    code = "import sys; from warcio.cli import main; main(sys.argv[1:])"
    done = subprocess.run(
        [sys.executable, "-c", code, "check", "-v", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.peer
async def test_pywb_cdx_server_answers_and_loads_as_the_local_archive(
    pywb_wayback: str, sample_dir: Path, aiohttp_client: AiohttpClient, tmp_path: Path
) -> None:
    yaml_text = (
        "collections:\n"
        "  local:\n"
        f"    index: {sample_dir / 'cdxj'}/\n"
        f"    resource: {sample_dir / 'warcs'}/\n"
        f"  remote: cdx+{pywb_wayback}/pywb/cdx\n"
    )
    client = await aiohttp_client(create_app(parse_config(yaml_text)))
    served = tmp_path / "served.warc"
    loaded = 0
    with served.open("wb") as out:
        for url in PEER_URLS:
            local = await index_lines(client, "local", {"url": url})
            assert local, url
            assert await index_lines(client, "remote", {"url": url}) == local, url
            for line in local:
                capture = json.loads(line)
                params = {"url": url, "closest": capture["timestamp"]}
                want = await client.get("/local/resource", params=params)
                got = await client.get("/remote/resource", params=params)
                if want.status != 200:  # e.g. a self-redirect: skipped locally
                    continue
                assert got.status == 200, await got.text()
                want_record, want_payload = split_record(await want.read())
                data = await got.read()
                got_record, got_payload = split_record(data)
                assert int(got.headers["Content-Length"]) == len(data)
                assert got_payload == want_payload, (url, capture["timestamp"])
                assert got_record.http_headers.get_statuscode() == (
                    want_record.http_headers.get_statuscode()
                )
                assert got_record.rec_headers.get_header("WARC-Date") == (
                    want_record.rec_headers.get_header("WARC-Date")
                )
                out.write(data + b"\r\n\r\n")
                loaded += 1
    assert loaded >= 20
    report = warcio_check(served)
    assert report.count("digest pass") == loaded
