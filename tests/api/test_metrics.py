"""``GET /metrics``: the Prometheus text format, read back with prometheus-client's parser."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.metrics import METRICS, register_collector
from gateway.config import parse_config
from gateway.server.app import create_app
from tests import test_recording
from tests.conftest import free_port
from tests.store.store_support import warc_files

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[str], Awaitable[Client]]
Labels = dict[str, str]
Families = dict[str, list[tuple[str, Labels, float]]]
#: The recording tests' live web (a real aiohttp server) and their recording config.
live_web = test_recording.live_web
recording_config = test_recording._config


async def scrape(client: Client) -> Families:
    """``{family name: [(sample name, labels, value)]}`` of one scrape."""
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples]
        for family in text_string_to_metric_families(await resp.text())
    }


def value(families: Families, sample: str, **labels: str) -> float:
    """The value of the one sample named ``sample`` whose labels include ``labels``."""
    family = sample.removesuffix("_total").removesuffix("_count").removesuffix("_sum")
    found = [
        v
        for name, have, v in families.get(family, [])
        if name == sample and labels.items() <= have.items()
    ]
    assert len(found) == 1, (sample, labels, families.get(family))
    return found[0]


async def test_requests_are_counted_by_route_and_status(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    for _ in range(3):
        assert (await client.get("/pywb/index", params={"url": "iana.org"})).status == 200
    assert (await client.get("/pywb/index", params={"url": "iana.org", "limit": "x"})).status == 400
    assert (await client.get("/nowhere/index", params={"url": "iana.org"})).status == 404
    assert (await client.get("/no/such/path/at/all")).status == 404
    families = await scrape(client)
    index = {"method": "GET", "route": "/{coll}/index"}
    assert value(families, "gateway_http_requests_total", **index, status="200") == 3
    assert value(families, "gateway_http_requests_total", **index, status="400") == 1
    assert value(families, "gateway_http_requests_total", **index, status="404") == 1
    unrouted = {"method": "*", "route": "unrouted", "status": "404"}
    assert value(families, "gateway_http_requests_total", **unrouted) == 1
    assert value(families, "gateway_http_request_duration_seconds_count", **index) == 5
    assert value(families, "gateway_http_request_duration_seconds_sum", **index) > 0
    buckets = [
        (float(labels["le"]), v)
        for name, labels, v in families["gateway_http_request_duration_seconds"]
        if name.endswith("_bucket") and labels["route"] == "/{coll}/index"
    ]
    assert buckets[-1] == (float("inf"), 5)
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
    # The memento route is labelled by its template, without the regexes.
    await client.get("/pywb/20140126200625id_/http://www.iana.org/_css/2013.1/print.css")
    families = await scrape(client)
    memento = {"route": "/{coll}/{timestamp}id_/{url}", "status": "200"}
    assert value(families, "gateway_http_requests_total", **memento) == 1
    # The first scrape is counted; this one only once it has been answered.
    assert value(families, "gateway_http_requests_total", route="/metrics", status="200") == 1


async def test_records_served_count_the_bytes_sent(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    small = await client.get("/iana/resource", params={"url": "http://www.iana.org/"})
    large = await client.get(
        "/iana/resource",
        params={"url": "http://www.iana.org/_img/bookmark_icon.ico", "closest": "2014"},
    )
    memento = await client.get("/iana/20140126200625id_/http://www.iana.org/_css/2013.1/print.css")
    head = await client.head("/iana/resource", params={"url": "http://www.iana.org/"})
    assert (small.status, large.status, memento.status, head.status) == (200, 200, 200, 200)
    sent = len(await small.read()) + len(await large.read()) + len(await memento.read())
    families = await scrape(client)
    step = {"collection": "iana", "step": "iana"}
    assert value(families, "gateway_records_served_total", **step) == 3  # HEAD sends no record
    assert value(families, "gateway_record_bytes_served_total", **step) == sent
    assert value(families, "gateway_records_served_total", collection="pywb") == 0


async def test_source_lookups_by_outcome_and_the_breaker_state(
    make_client: MakeClient, sample_dir: Path
) -> None:
    refused = free_port()  # nothing listens there
    client = await make_client(f"""
collections:
  both:
    index_group:
      local: {sample_dir}/cdxj/iana.cdxj
      gone: cdx+http://127.0.0.1:{refused}/cdx
""")
    for _ in range(4):  # the third failure in a row opens the breaker
        resp = await client.get("/both/index", params={"url": "iana.org"})
        assert resp.status == 200
    families = await scrape(client)
    gone = {"collection": "both", "step": "both", "source": "gone"}
    local = {"collection": "both", "step": "both", "source": "local"}
    assert value(families, "gateway_source_lookups_total", **local, outcome="ok") == 4
    assert value(families, "gateway_source_lookups_total", **gone, outcome="error") == 3
    assert value(families, "gateway_source_lookups_total", **gone, outcome="skipped") == 1
    assert value(families, "gateway_source_lookups_total", **gone, outcome="timeout") == 0
    assert value(families, "gateway_source_breaker_open", **gone) == 1
    assert value(families, "gateway_source_breaker_open", **local) == 0
    assert value(families, "gateway_source_consecutive_failures", **gone) == 3


@pytest.mark.parametrize("index", ["cdxj/iana.cdxj", "zipcdx/zipnum-sample.idx"])
async def test_the_memo_of_short_answers_counts_its_hits_and_misses(
    make_client: MakeClient, sample_dir: Path, index: str
) -> None:
    client = await make_client(f"""
collections:
  iana:
    index: {sample_dir}/{index}
""")
    for url in ("http://www.iana.org/", "http://www.iana.org/", "http://www.iana.org/about"):
        resp = await client.get("/iana/index", params={"url": url})
        assert resp.status == 200
    families = await scrape(client)
    source = {"collection": "iana", "step": "iana", "source": "iana"}
    assert value(families, "gateway_index_memo_hits_total", **source) == 1
    assert value(families, "gateway_index_memo_misses_total", **source) == 2


@pytest.fixture
async def slow_cdx(aiohttp_server: Callable[..., Awaitable[TestServer]]) -> str:
    """The URL of a CDX server on 127.0.0.1 that takes 10 s to answer."""

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(10)
        return web.Response(text="")

    upstream = web.Application()
    upstream.router.add_get("/cdx", slow)
    server = await aiohttp_server(upstream, host="127.0.0.1")
    return f"http://127.0.0.1:{server.port}/cdx"


async def test_timeouts_are_counted_apart_from_errors(
    make_client: MakeClient, slow_cdx: str
) -> None:
    client = await make_client(
        f"collections:\n  slow:\n    index: cdx+{slow_cdx}\n    timeout: 0.2\n"
    )
    resp = await client.get("/slow/index", params={"url": "iana.org"})
    assert resp.status == 503
    families = await scrape(client)
    labels = {"collection": "slow", "source": "slow"}
    assert value(families, "gateway_source_lookups_total", **labels, outcome="timeout") == 1
    assert value(families, "gateway_source_lookups_total", **labels, outcome="error") == 0


async def test_store_captures_by_dedup_decision(
    make_client: MakeClient, live_web: tuple[str, dict[str, int]], tmp_path: Path
) -> None:
    base, _hits = live_web
    client = await make_client(recording_config(tmp_path))
    for _ in range(2):
        assert (await client.get("/rec/resource", params={"url": f"{base}/page"})).status == 200
    families: Families = {}
    for _ in range(100):  # acknowledgements are asynchronous
        families = await scrape(client)
        if sum(v for _, _, v in families.get("gateway_store_captures", [])) >= 2:
            break
        await asyncio.sleep(0.05)
    assert value(families, "gateway_store_captures_total", policy="revisit", outcome="full") == 1
    assert value(families, "gateway_store_captures_total", policy="revisit", outcome="revisit") == 1
    written = sum(p.stat().st_size for p in warc_files(tmp_path / "warcs"))
    # Request and response records: the bytes counted are those of the responses and revisits.
    assert 0 < value(families, "gateway_store_bytes_written_total") < written


class _StandIn:
    """A subsystem's collector: one family built from its own state at each scrape."""

    def __init__(self, name: str, label: str, counts: dict[str, int]) -> None:
        self.name, self.label, self.counts = name, label, counts

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, "Stand-in.", labels=[self.label])
        for key, count in self.counts.items():
            family.add_metric([key], count)
        yield family


async def test_registered_collectors_are_scraped_each_time(
    aiohttp_client: Callable[..., Awaitable[Client]], sample_yaml: str
) -> None:
    app = create_app(parse_config(sample_yaml))
    jobs = _StandIn("gateway_jobs", "state", {"queued": 2, "running": 1})
    register_collector(app, jobs)
    client = await aiohttp_client(app)
    assert value(await scrape(client), "gateway_jobs", state="queued") == 2
    jobs.counts["queued"] = 0
    # Registered after the first scrape (a subsystem started later).
    register_collector(app, _StandIn("gateway_copies", "status", {"present": 7}))
    families = await scrape(client)
    assert value(families, "gateway_jobs", state="queued") == 0
    assert value(families, "gateway_copies", status="present") == 7
    # prometheus-client's standard process families come along.
    assert value(families, "process_resident_memory_bytes") > 0


async def test_a_client_that_leaves_is_counted_as_499(slow_cdx: str) -> None:
    app = create_app(parse_config(f"collections:\n  slow: cdx+{slow_cdx}\n"))
    runner = web.AppRunner(app, handler_cancellation=True)  # as gateway serve runs it
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow/index?url=iana.org HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.3)
        writer.transport.abort()  # gone before the answer
        counted = 0
        for _ in range(100):
            stats = app[METRICS].routes
            counted = sum(s.statuses.get(499, 0) for s in stats if s.route == "/{coll}/index")
            if counted:
                break
            await asyncio.sleep(0.05)
        assert counted == 1
    finally:
        await runner.cleanup()
