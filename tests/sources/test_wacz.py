"""WACZ files read in place (gateway.sources.wacz): records, integrity, directories, HTTP.

The WACZ is built by py-wacz from the pywb sample's WARCs at test time
(``sample_wacz``); these checks add what the contract suites do not say:
every record is byte for byte the record of the WARC it came from, a damaged
WACZ is refused with the resource named, a directory picks up a new file,
and a WACZ over HTTP is read with range requests only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import shutil
import uuid
import zipfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import LoadError, SourceUnavailable
from gateway.loaders.base import LoadContext, LoadedRecord, ResourceLoader
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig
from gateway.sources.wacz import WaczSource, WaczSourceConfig
from gateway.storage.base import Storage
from gateway.storage.local import LocalStorageConfig
from gateway.storage.s3_config import S3StorageConfig
from gateway.storage.settings import StorageSpec
from gateway.store import Store, StoreSettings
from tests.loaders.conftest import make_finder
from tests.wacz_support import flip_byte

EVERYTHING = CaptureQuery(url="-", key="", end_key="~")
AiohttpServer = Callable[..., Awaitable[TestServer]]


@pytest.fixture
async def clients() -> AsyncIterator[SharedClients]:
    shared = SharedClients()
    await shared.start()
    yield shared
    await shared.close()


def _source(
    path: str, clients: SharedClients, *, stat_interval_s: float = 1.0, verify: bool = True
) -> WaczSource:
    config = dataclasses.replace(
        WaczSourceConfig.from_shorthand(path), stat_interval_s=stat_interval_s, verify=verify
    )
    source = WaczSource.from_config(config, name="w", clients=clients)
    assert isinstance(source, WaczSource)
    return source


async def _everything(source: WaczSource) -> list[CdxRecord]:
    records = []
    async for record in source.lookup(EVERYTHING):
        record.tag("w")  # as the aggregator tags a member's captures
        records.append(record)
    return records


async def _bytes(loader: ResourceLoader, capture: CdxRecord, index: list[CdxRecord]) -> bytes:
    ctx = LoadContext(request_url=capture.url, find_original=make_finder(index))
    loaded: LoadedRecord = await loader.load(capture, ctx)
    try:
        body = b"".join([chunk async for chunk in loaded.body])
        return loaded.warc_headers + loaded.http_headers + body
    finally:
        await loaded.aclose()


async def _outcome(loader: ResourceLoader, capture: CdxRecord, index: list[CdxRecord]) -> object:
    """The record's bytes, or the kind of load error (a 3xx to itself is refused)."""
    try:
        return await _bytes(loader, capture, index)
    except LoadError as exc:
        return type(exc).__name__


async def test_every_record_is_the_record_of_the_warc_it_came_from(
    sample_wacz: Path, sample_dir: Path, clients: SharedClients
) -> None:
    source = _source(str(sample_wacz), clients)
    warcs = WarcLoader(WarcLoaderConfig.from_shorthand(str(sample_dir / "warcs")), clients=clients)
    try:
        index = await _everything(source)
        assert len(index) == 174  # iana.cdxj + example.cdxj
        loader = source.resource_loaders()[0]
        for capture in index:
            assert loader.accepts(capture), capture
            served = await _outcome(loader, capture, index)
            assert served == await _outcome(warcs, capture.copy(), index), capture
            assert served == "SelfRedirect" or isinstance(served, bytes)
    finally:
        await source.aclose()


async def test_a_flipped_byte_refuses_the_wacz_naming_file_and_resource(
    sample_wacz: Path, tmp_path: Path, clients: SharedClients
) -> None:
    damaged = flip_byte(sample_wacz, "archive/iana.warc.gz", tmp_path / "damaged.wacz")
    source = _source(str(damaged), clients)
    try:
        for _ in range(2):  # refused, and still refused: never half-served
            with pytest.raises(SourceUnavailable) as caught:
                await _everything(source)
            assert "damaged.wacz" in caught.value.reason
            assert "resource archive/iana.warc.gz: hash sha256:" in caught.value.reason
        assert "refused: damaged.wacz" in source.describe()
    finally:
        await source.aclose()
    unchecked = _source(str(damaged), clients, verify=False)
    try:
        assert len(await _everything(unchecked)) == 174  # the check is what refused it
    finally:
        await unchecked.aclose()


async def test_a_wacz_copied_into_the_directory_is_served_without_a_restart(
    sample_wacz: Path, tmp_path: Path, clients: SharedClients
) -> None:
    folder = tmp_path / "crawls"
    source = _source(str(folder) + "/", clients, stat_interval_s=0)
    try:
        assert await _everything(source) == []
        shutil.copyfile(sample_wacz, folder / ".incoming")
        (folder / ".incoming").rename(folder / "new.wacz")
        records = await _everything(source)
        assert len(records) == 174
        assert {record.source for record in records} == {"w:new.wacz"}
        loaded = await _bytes(source.resource_loaders()[0], records[0], records)
        assert loaded.startswith(b"WARC/1.0\r\n")
        (folder / "new.wacz").unlink()
        assert await _everything(source) == []
    finally:
        await source.aclose()


def _range_server(
    folder: Path, seen: list[str | None], honour_range: bool = True
) -> web.Application:
    @web.middleware
    async def record(request: web.Request, handler: object) -> web.StreamResponse:
        seen.append(request.headers.get("Range"))
        if not honour_range:
            return web.Response(body=(folder / request.path.rsplit("/", 1)[-1]).read_bytes())
        return await handler(request)  # type: ignore[operator,no-any-return]

    app = web.Application(middlewares=[record])
    app.router.add_static("/files/", folder)  # answers Range requests with 206
    return app


async def test_a_wacz_over_http_is_read_with_range_requests_only(
    sample_wacz: Path, aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    seen: list[str | None] = []
    server = await aiohttp_server(_range_server(sample_wacz.parent, seen), host="127.0.0.1")
    source = _source(f"wacz+{server.make_url('/files/sample.wacz')}", clients)
    local = _source(str(sample_wacz), clients)
    try:
        records = await _everything(source)
        assert [r.to_cdxj() for r in records] == [r.to_cdxj() for r in await _everything(local)]
        capture = next(r for r in records if r.url == "http://www.iana.org/")
        served = await _bytes(source.resource_loaders()[0], capture, records)
        assert served == await _bytes(local.resource_loaders()[0], capture, records)
        assert seen
        assert all(value is not None for value in seen), seen
    finally:
        await source.aclose()
        await local.aclose()


async def test_a_server_ignoring_range_is_named_as_the_problem(
    sample_wacz: Path, aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    app = _range_server(sample_wacz.parent, [], honour_range=False)
    server = await aiohttp_server(app, host="127.0.0.1")
    source = _source(f"wacz+{server.make_url('/files/sample.wacz')}", clients)
    try:
        with pytest.raises(SourceUnavailable, match="range support"):
            await _everything(source)
    finally:
        await source.aclose()


def _plain_wacz(sample_dir: Path, out: Path, folder_in_filename: bool = False) -> Path:
    """A WACZ with a plain CDXJ index (not ZipNum), written with zipfile as the spec says;
    its CDX ``filename`` values with ``archive/`` in front when ``folder_in_filename``."""
    warc = (sample_dir / "warcs" / "example.warc.gz").read_bytes()
    cdxj = (sample_dir / "cdxj" / "example.cdxj").read_bytes()
    if folder_in_filename:
        cdxj = cdxj.replace(b'"filename": "', b'"filename": "archive/')
    entries = {"archive/example.warc.gz": warc, "indexes/index.cdxj": cdxj}
    resources = [
        {"name": name.rsplit("/", 1)[1], "path": name, "bytes": len(data),
         "hash": "sha256:" + hashlib.sha256(data).hexdigest()}
        for name, data in entries.items()
    ]  # fmt: skip
    package = json.dumps({"profile": "data-package", "wacz_version": "1.1.1",
                          "resources": resources}).encode()  # fmt: skip
    digest = {"path": "datapackage.json", "hash": "sha256:" + hashlib.sha256(package).hexdigest()}
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data, compress_type=zipfile.ZIP_STORED)
        zf.writestr("datapackage.json", package, compress_type=zipfile.ZIP_DEFLATED)
        zf.writestr("datapackage-digest.json", json.dumps(digest), zipfile.ZIP_DEFLATED)
    return out


async def test_a_plain_cdxj_index_is_searched_as_a_cdxj_file(
    sample_dir: Path, tmp_path: Path, clients: SharedClients
) -> None:
    source = _source(str(_plain_wacz(sample_dir, tmp_path / "plain.wacz")), clients)
    try:
        records = await _everything(source)
        expected = (sample_dir / "cdxj" / "example.cdxj").read_text("utf-8").split("\n")
        assert [(r.urlkey, r.timestamp) for r in records] == [
            tuple(line.split(" ", 2)[:2]) for line in expected if line.strip()
        ]
        query = CaptureQuery.for_url("http://example.com/?example=1")
        exact = [r async for r in source.lookup(query)]
        assert [r.timestamp for r in exact] == ["20140103030321", "20140103030341"]
        revisit = next(r for r in records if r.is_revisit)
        served = await _bytes(source.resource_loaders()[0], revisit, records)
        assert b"WARC-Refers-To-Target-URI" in served  # resolved from its original
    finally:
        await source.aclose()


async def test_a_filename_that_names_the_archive_folder_loads_too(
    sample_dir: Path, tmp_path: Path, clients: SharedClients
) -> None:
    wacz = _plain_wacz(sample_dir, tmp_path / "folder.wacz", folder_in_filename=True)
    source = _source(str(wacz), clients)
    try:
        records = await _everything(source)
        assert records[0].filename == "archive/example.warc.gz"
        served = await _bytes(source.resource_loaders()[0], records[0], records)
        assert served.startswith(b"WARC/1.0\r\nWARC-Type: response\r\n")
    finally:
        await source.aclose()


async def test_a_file_that_is_not_a_zip_is_refused(tmp_path: Path, clients: SharedClients) -> None:
    (tmp_path / "junk.wacz").write_bytes(b"not a zip at all\n" * 100)
    source = _source(str(tmp_path / "junk.wacz"), clients)
    try:
        with pytest.raises(SourceUnavailable, match=r"junk\.wacz: not a ZIP file"):
            await _everything(source)
    finally:
        await source.aclose()


SIGNED = Path(__file__).resolve().parents[1] / "data" / "wacz"


async def test_a_signed_wacz_is_verified_with_authsign(clients: SharedClients) -> None:
    from gateway.loaders.wacz_archive import open_wacz

    def no_session() -> object:
        raise AssertionError("a local file needs no session")

    path = str(SIGNED / "valid_signed_example_1.wacz")
    archive = await open_wacz(path, label="signed.wacz", session=no_session)  # type: ignore[arg-type]
    notes = await archive.verify()
    assert notes == [
        "signature verified: signed by btrix-sign-test.webrecorder.net at 2022-01-18T19:00:12Z"
    ]
    source = _source(path, clients)
    try:
        assert await _everything(source)
    finally:
        await source.aclose()


async def test_a_wacz_whose_signature_fails_is_refused(clients: SharedClients) -> None:
    source = _source(str(SIGNED / "invalid_signed_example_1.wacz"), clients)
    try:
        rejected = r"datapackage-digest\.json: signature rejected"
        with pytest.raises(SourceUnavailable, match=rejected):
            await _everything(source)
    finally:
        await source.aclose()


async def test_concurrent_first_lookups_share_one_opening(
    sample_wacz: Path, aiohttp_server: AiohttpServer, clients: SharedClients
) -> None:
    seen: list[str | None] = []
    server = await aiohttp_server(_range_server(sample_wacz.parent, seen), host="127.0.0.1")
    url = f"wacz+{server.make_url('/files/sample.wacz')}"
    alone = _source(url, clients)
    together = _source(url, clients)
    try:
        await _everything(alone)
        one_opening = len(seen)
        seen.clear()
        answers = await asyncio.gather(*(_everything(together) for _ in range(5)))
        assert {len(answer) for answer in answers} == {174}
        # One opening (the size, the tail, the entries, the whole file hashed), then
        # each lookup's own range read of its one index block: 4 more than one lookup.
        assert len(seen) == one_opening + 4
    finally:
        await alone.aclose()
        await together.aclose()


async def test_a_central_directory_past_the_first_read_is_fetched_too(
    sample_wacz: Path, tmp_path: Path, clients: SharedClients
) -> None:
    # 2,000 more entries (logs/) make the ZIP directory longer than the 64 KiB read
    # first from the end of the file: the reader fetches from the directory's start.
    crowded = tmp_path / "crowded.wacz"
    shutil.copyfile(sample_wacz, crowded)
    with zipfile.ZipFile(crowded, "a") as zf:
        for number in range(2000):
            zf.writestr(f"logs/a-rather-long-log-file-name-number-{number:05}.log", b"")
    with zipfile.ZipFile(crowded) as zf:
        directory_bytes = sum(
            46 + len(info.filename.encode()) + len(info.extra) + len(info.comment)
            for info in zf.infolist()
        )  # the size of the central directory's file headers (APPNOTE 4.3.12)
    assert directory_bytes > 2 * 64 * 1024
    source = _source(str(crowded), clients)
    try:
        assert len(await _everything(source)) == 174
    finally:
        await source.aclose()


def _understated(wacz: Path, name: str, size: int, out: Path) -> Path:
    """A copy of ``wacz`` whose central directory states ``size`` bytes for entry ``name``."""
    data = bytearray(wacz.read_bytes())
    central = data.find(b"PK\x01\x02")  # each central directory file header (APPNOTE 4.3.12)
    while central >= 0:
        name_length = int.from_bytes(data[central + 28 : central + 30], "little")
        if data[central + 46 : central + 46 + name_length] == name.encode():
            data[central + 24 : central + 28] = size.to_bytes(4, "little")
        central = data.find(b"PK\x01\x02", central + 4)
    out.write_bytes(bytes(data))
    return out


async def test_an_entry_that_inflates_past_its_stated_size_is_refused(
    sample_wacz: Path, tmp_path: Path, clients: SharedClients
) -> None:
    # The central directory says datapackage.json is 10 bytes; it inflates to more
    # (as a deflate bomb would): the reader stops at the stated size.
    bomb = _understated(sample_wacz, "datapackage.json", 10, tmp_path / "bomb.wacz")
    source = _source(str(bomb), clients)
    try:
        with pytest.raises(SourceUnavailable, match="inflates past the 10 bytes"):
            await _everything(source)
    finally:
        await source.aclose()


async def _put(storage: Storage, data: bytes, name: str) -> None:
    async def one() -> AsyncIterator[bytes]:
        yield data

    await storage.put(name, one(), size=len(data), sha256=hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize("kind", ["local", "s3"])
async def test_a_wacz_on_a_storage_of_the_store_is_read_in_place(
    kind: str,
    sample_wacz: Path,
    tmp_path: Path,
    clients: SharedClients,
    request: pytest.FixtureRequest,
) -> None:
    config: object
    if kind == "local":
        (tmp_path / "backup").mkdir()
        config = LocalStorageConfig(path=str(tmp_path / "backup"))
    else:
        s3 = request.getfixturevalue("s3_env")
        bucket = request.getfixturevalue("wacz_bucket")
        config = S3StorageConfig(bucket=bucket, endpoint=s3.endpoint, prefix=f"{uuid.uuid4().hex}/")
    spec = StorageSpec(type=kind, config=config, path="store.storages.backup")
    settings = StoreSettings(root=str(tmp_path / "store"), fsync="never", storages={"backup": spec})
    store = await Store.open(settings)
    clients.store = store
    source = _source("wacz+storage:backup/crawls/sample.wacz", clients)
    try:
        with pytest.raises(SourceUnavailable, match=r"storage:backup/crawls/sample\.wacz"):
            await _everything(source)  # not there yet
        data = await asyncio.to_thread(sample_wacz.read_bytes)
        await _put(await store.replicas.storage("backup"), data, "crawls/sample.wacz")
        records = await _everything(source)
        assert len(records) == 174
        capture = next(r for r in records if r.url == "http://www.iana.org/")
        local = _source(str(sample_wacz), clients)
        try:
            served = await _bytes(source.resource_loaders()[0], capture, records)
            assert served == await _bytes(local.resource_loaders()[0], capture, records)
        finally:
            await local.aclose()
    finally:
        await source.aclose()
        clients.store = None
        await store.close()
