"""Versions (issue section 3) through the Index API path: StoreSource + cdxops.

Captures are identified by (urlkey, timestamp); same-second captures of one
URL are both kept, in acknowledgement order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import cast

import pytest

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.cdxops import process
from gateway.cdx.query import parse_query
from gateway.clients import SharedClients
from gateway.commands.store import main as store_cli
from gateway.errors import SourceUnavailable
from gateway.loaders.base import LoadContext
from gateway.sources.base import IndexSource
from gateway.sources.store import StoreSource, StoreSourceConfig
from gateway.store.settings import StoreSettings
from gateway.store.store import Store
from tests.store.store_support import make_capture, read_record

URL = "http://example.com/page"
DATES = [datetime(year, 6, 1, 12, 0, 0, tzinfo=UTC) for year in (2020, 2021, 2022, 2023, 2024)]


async def _index_api(source: StoreSource, **params: str) -> list[CdxRecord]:
    query = parse_query({name.rstrip("_"): [value] for name, value in params.items()})
    return [record async for record in process(source.lookup(query), query)]


@pytest.fixture
async def versions(store: Store) -> StoreSource:
    for i, when in enumerate(DATES):
        await store.record(make_capture(URL, f"version {i}".encode(), when=when))
    await store.record(make_capture("http://example.com/other", b"other", when=DATES[0]))
    return StoreSource.for_store(store, name="store")


async def test_all_versions_sorted_by_timestamp(versions: StoreSource) -> None:
    records = await _index_api(versions, url=URL)
    assert [r.timestamp for r in records] == [d.strftime("%Y%m%d%H%M%S") for d in DATES]
    assert all(r.urlkey == "com,example)/page" for r in records)


async def test_latest_is_reverse_limit_one(versions: StoreSource, store: Store) -> None:
    [latest] = await _index_api(versions, url=URL, sort="reverse", limit="1")
    assert latest.timestamp == "20240601120000"
    assert read_record(store.warc_dir, latest).payload == b"version 4"


async def test_nearest_at_or_before_a_time(versions: StoreSource) -> None:
    [before] = await _index_api(versions, url=URL, sort="reverse", to="20221231", limit="1")
    assert before.timestamp == "20220601120000"
    [closest] = await _index_api(
        versions, url=URL, closest="20220601110000", to="20220601110000", limit="1"
    )
    assert closest.timestamp == "20210601120000"


async def test_closest_without_bounds(versions: StoreSource) -> None:
    records = await _index_api(versions, url=URL, closest="20230101", limit="2")
    assert [r.timestamp for r in records] == ["20230601120000", "20220601120000"]


async def test_date_range(versions: StoreSource) -> None:
    records = await _index_api(versions, url=URL, from_="2021", to="2023")
    assert [r.timestamp[:4] for r in records] == ["2021", "2022", "2023"]


async def test_prefix_query_spans_urls(versions: StoreSource) -> None:
    records = await _index_api(versions, url="http://example.com/*")
    assert [r.url for r in records].count(URL) == 5
    assert records == sorted(records, key=lambda r: (r.urlkey, r.timestamp))


async def test_same_second_captures_are_all_kept_in_ack_order(store: Store) -> None:
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    acks = []
    for i in range(3):
        moment = when.replace(microsecond=i * 1000)
        acks.append(await store.record(make_capture(URL, f"same second {i}".encode(), when=moment)))
    source = StoreSource.for_store(store)
    records = await _index_api(source, url=URL)
    assert [r.timestamp for r in records] == ["20250102030405"] * 3
    assert [r.offset for r in records] == [a.capture.offset for a in acks]
    [latest] = await _index_api(source, url=URL, sort="reverse", limit="1")
    assert read_record(store.warc_dir, latest).payload == b"same second 2"


async def test_acknowledged_capture_is_findable_at_once(store: Store) -> None:
    source = StoreSource.for_store(store)
    for i in range(5):
        ack = await store.record(make_capture(URL, f"v{i}".encode()))
        [latest] = await _index_api(source, url=URL, sort="reverse", limit="1")
        assert latest.offset == ack.capture.offset


async def test_filters_are_left_to_the_aggregator(versions: StoreSource) -> None:
    # A filter disables the reverse+limit shortcut, so nothing is lost.
    records = await _index_api(versions, url=URL, sort="reverse", limit="1", filter="=url:" + URL)
    assert [r.timestamp for r in records] == ["20240601120000"]


async def test_store_source_contract(store: Store) -> None:
    clients = cast(SharedClients, _Clients(store))
    source = StoreSource.from_config(
        StoreSourceConfig.from_shorthand("$store"), name="s", clients=clients
    )
    assert isinstance(source, IndexSource)
    assert "snapshot store" in source.describe()
    await store.record(make_capture(URL, b"x"))
    assert len(await _index_api(source, url=URL)) == 1
    with pytest.raises(ValueError, match=r"\$store"):
        StoreSourceConfig.from_shorthand("$live")
    await source.aclose()


async def test_store_source_without_an_open_store_is_unavailable() -> None:
    source = StoreSource(name="store", store=lambda: None)
    query = parse_query({"url": [URL]})
    with pytest.raises(SourceUnavailable, match="not open"):
        [r async for r in source.lookup(query)]


def test_history_command(settings: StoreSettings, capsys: pytest.CaptureFixture[str]) -> None:
    async def fill() -> None:
        async with await Store.open(settings) as store:
            for when in DATES:
                await store.record(make_capture(URL, b"h", when=when))

    asyncio.run(fill())
    root = settings.root

    def run(*args: str) -> list[str]:
        assert store_cli(["history", "--root", root, URL, *args]) == 0
        return [line.split(" ")[1] for line in capsys.readouterr().out.splitlines()]

    assert len(run()) == 5
    assert len(run("--all")) == 5
    assert run("--latest") == ["20240601120000"]
    assert run("--at", "2022") == ["20220601120000"]
    assert run("--at", "20220601115959") == ["20210601120000"]
    assert run("--from", "2021", "--to", "2022") == ["20210601120000", "20220601120000"]
    assert store_cli(["history", "--root", root, URL, "--at", "2022", "--from", "2020"]) == 2
    with pytest.raises(SystemExit):
        store_cli(["history", "--root", root, URL, "--at", "20x"])


class _Clients:
    """Stands in for SharedClients once the lead adds its ``store`` attribute."""

    def __init__(self, store: Store) -> None:
        self.store = store


async def _served_payload(source: StoreSource, capture: CdxRecord) -> tuple[bytes, bytes]:
    """Load ``capture`` with the source's own loader, as a collection step would."""

    async def find_original(url: str, timestamp: str, digest: str) -> AsyncIterator[CdxRecord]:
        query = parse_query({"url": [url], "closest": [timestamp]})
        async for record in process(source.lookup(query), query):
            if record.digest == digest and not record.is_revisit:
                record.fields["source-coll"] = source.name
                yield record

    [loader] = source.resource_loaders()
    capture.fields["source-coll"] = source.name
    assert loader.accepts(capture)
    loaded = await loader.load(
        capture, LoadContext(request_url=capture.url, find_original=find_original)
    )
    try:
        body = b"".join([chunk async for chunk in loaded.body])
    finally:
        await loaded.aclose()
    return loaded.warc_headers, body


async def test_store_records_load_through_the_gateway_warc_loader(store: Store) -> None:
    source = StoreSource.for_store(store, name="mine")
    body = b"<html>loaded through the WARC loader</html>"
    await store.record(make_capture(URL, body, when=DATES[0]))
    await store.record(make_capture(URL, body, when=DATES[1]))  # revisit, same URL
    await store.record(make_capture("http://example.org/copy", body, when=DATES[2]))
    revisits = 0
    for url in (URL, "http://example.org/copy"):
        for capture in await _index_api(source, url=url):
            headers, served = await _served_payload(source, capture)
            assert served == body  # a revisit is served with its original's payload
            revisits += capture.is_revisit
            assert (b"WARC-Refers-To-Target-URI: " + URL.encode() in headers) == capture.is_revisit
    assert revisits == 2
    other = CdxRecord(
        "com,example)/",
        "20200101000000",
        {"filename": "x.warc.gz", "offset": "0", "source-coll": "else"},
    )
    assert not source.resource_loaders()[0].accepts(other)
