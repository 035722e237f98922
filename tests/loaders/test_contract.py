"""The ResourceLoader contract (gateway.loaders.base), checked for every loader type.

Each parameter of the ``loader_under_test`` fixture builds a loader of one
type, the captures it is meant to load (``own``: small and large records,
revisits where the type has them) and captures that belong to another loader
(``foreign``). The checks:

``accepts``
    ``accepts()`` is true for every own capture and false for every foreign
    one (no ``filename``, no ``load_url``, another member's ``source-coll``);
``record``
    ``warc_headers + http_headers + body`` parses with warcio's
    ``ArchiveIterator`` as exactly one record whose ``WARC-Target-URI`` is
    the capture's URL (``LoadedRecord.target_uri`` too) and whose WARC
    ``Content-Length`` is the byte count of its block;
``content_length``
    ``LoadedRecord.content_length``, when not None, is the byte count of the
    record served;
``warc_date``
    ``LoadedRecord.warc_date`` (the Memento-Datetime) is an ISO 8601 WARC-Date
    (WARC 1.1 §5.4), equal to the record's and to the served capture's
    timestamp;
``payload_digest``
    a ``WARC-Payload-Digest`` (WARC 1.1 §5.9) is the digest of the payload
    served (for a revisit served as pywb serves it, the original's digest
    over the original's payload);
``index_digest``
    the payload served has the capture's CDX ``digest``;
``aclose``
    ``LoadedRecord.aclose()`` may be called twice, after reading the body or
    without reading it, and releases what the load opened (file descriptors
    counted in ``/proc/self/fd``, asyncio tasks); a loader with its own
    ``aclose`` (the live loader's session) may close twice;
``early_close``
    reading one chunk, then ``aclose()``, leaks no descriptor and no task;
``failure``
    a broken variant (missing file, unreachable upstream) raises the
    expected :class:`~gateway.errors.LoadError` subclass, never a foreign
    exception, and leaks nothing.

Adding a loader type
====================

1. Write ``async def build_<id>(env: LoaderEnv) -> Built`` returning the
   loader (named :data:`NAME` when it takes a name), its own captures,
   foreign captures and the ``find_original`` its revisits need. Start
   servers with ``await env.aiohttp_server(app)``, ask for session fixtures
   with ``env.fixture("redis_server")``, undo anything made outside
   ``env.tmp_path`` with ``env.add_cleanup(async_callable)``.
2. Write ``async def broken_<id>(env: LoaderEnv) -> Built`` whose captures
   must fail to load.
3. Add ONE line to :data:`LOADER_KINDS`::

       "replay": Kind(ReplayLoader, build_replay, broken_replay, UpstreamUnreachable),

   The first field is the loader class (several entries may test one class,
   as the WARC loader's resolvers do); the last the LoadError subclass the
   broken variant raises. ``cannot={"check": "why"}`` skips a check from
   :data:`CHECKS` with that reason; ``peer=True`` marks an entry that needs
   pywb (``scripts/install-peers``).

:func:`test_every_loader_type_has_a_contract_entry` fails while a class in
``LOADER_TYPES``, or any class in ``gateway`` implementing the protocol, has
no entry here.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
from aiohttp import web
from warcio.timeutils import iso_date_to_timestamp

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import (
    ArchiveFileNotFound,
    ArchiveRefused,
    ArchiveUnavailable,
    LoadError,
    PlaceUnreachable,
    UpstreamStatusError,
    UpstreamUnreachable,
)
from gateway.loaders import LOADER_TYPES
from gateway.loaders.base import LoadContext
from gateway.loaders.live import LiveLoader
from gateway.loaders.replay import ReplayLoader
from gateway.loaders.resolvers import resolver_config_from_shorthand
from gateway.loaders.wacz import WaczLoader
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig
from gateway.sources.store import StoreRecordLoader, StoreSource
from gateway.sources.wacz import WaczSource, WaczSourceConfig
from gateway.storage.s3 import S3Storage
from gateway.storage.s3_config import S3StorageConfig
from gateway.storage.settings import RetentionPolicy, StorageSpec
from gateway.store import Store, StoreSettings
from gateway.store.object_types import BATCH, COPY
from gateway.store.replication.passes import enqueue_pass, open_jobs, report_of, work_pass
from tests.conftest import free_port
from tests.loaders.conftest import make_finder
from tests.loaders.contract_support import (
    CHECKS,
    CONTRACT_WARCS,
    NAME,
    AiohttpServer,
    Built,
    Kind,
    LoaderEnv,
    Subject,
    assert_released,
    baseline,
    close_loader,
    load_and_drain,
    loader_classes_in_gateway,
    no_file,
    other_member,
    parse_one,
    pick,
    remote_capture,
    sha1_base32,
    tagged,
    verify_digest,
)
from tests.loaders.live_web import live_web
from tests.loaders.replay_archive import GZIPPED, PAYLOAD, replay_archive_app
from tests.sources.redis_support import delete_prefix, redis_client, unique_prefix
from tests.storage.seaweedfs import SeaweedFS
from tests.store.store_support import warc_files
from tests.wacz_support import flip_byte, upload

#: (urlkey, timestamp) of the sample captures loaded: a small response, its
#: revisit, a record whose archived headers say chunked, a payload of several
#: chunks, a revisit of another file, and a record that inflates to more than
#: 256 KiB (several chunks however large the reads).
SAMPLE_CAPTURES: Final = (
    ("com,example)/?example=1", "20140103030321"),
    ("com,example)/?example=1", "20140103030341"),
    ("org,iana)/", "20140126200624"),
    ("org,iana)/_css/2013.1/fonts/opensans-bold.ttf", "20140126200625"),
    ("org,iana)/_css/2013.1/fonts/inconsolata.otf", "20140126200912"),
    ("org,iana)/protocols", "20140126200715"),
)
#: Smallest chunk the WARC loader reads: bodies of more than one chunk.
SMALL_CHUNK_BYTES: Final = 1024
#: Payload bytes kept in memory by spooling loaders here: larger ones use a file.
SMALL_SPOOL_BYTES: Final = 4096
_WARC_DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z\Z")


# ------------------------------------------------------------------ builders
def _warc_loader(env: LoaderEnv, location: str, **options: int) -> WarcLoader:
    config = WarcLoaderConfig(
        resolvers=(resolver_config_from_shorthand(location),),
        chunk_bytes=SMALL_CHUNK_BYTES,
        **options,
    )
    loader = WarcLoader.from_config(config, clients=env.clients)
    assert isinstance(loader, WarcLoader)
    return loader


def _warc_built(env: LoaderEnv, loader: WarcLoader) -> Built:
    index = env.index()
    return Built(loader, pick(index, SAMPLE_CAPTURES), no_file(), make_finder(index))


async def build_warc_local(env: LoaderEnv) -> Built:
    # Every read of a long record goes through a worker thread.
    return _warc_built(env, _warc_loader(env, str(env.warcs), inline_read_max_bytes=0))


async def broken_warc_local(env: LoaderEnv) -> Built:
    empty = env.tmp_path / "no-warcs"
    empty.mkdir()
    return _warc_built(env, _warc_loader(env, str(empty)))


async def build_warc_http(env: LoaderEnv) -> Built:
    app = web.Application()
    app.router.add_static("/warcs/", env.warcs)  # answers Range requests with 206
    server = await env.aiohttp_server(app, host="127.0.0.1")
    return _warc_built(env, _warc_loader(env, str(server.make_url("/warcs/"))))


async def broken_warc_http(env: LoaderEnv) -> Built:
    return _warc_built(env, _warc_loader(env, f"http://127.0.0.1:{free_port()}/warcs/"))


def _path_index(env: LoaderEnv, folder: Path) -> str:
    path = env.tmp_path / "paths.txt"
    path.write_text("".join(f"{name}\t{folder / name}\n" for name in CONTRACT_WARCS), "utf-8")
    return f"warc-index+{path}"


async def build_warc_path_index(env: LoaderEnv) -> Built:
    return _warc_built(env, _warc_loader(env, _path_index(env, env.warcs)))


async def broken_warc_path_index(env: LoaderEnv) -> Built:
    return _warc_built(env, _warc_loader(env, _path_index(env, env.tmp_path / "moved")))


async def build_warc_redis(env: LoaderEnv) -> Built:
    server: str = env.fixture("redis_server")
    key = unique_prefix("contract") + ":warcs"
    async with redis_client(server) as client:
        for name in CONTRACT_WARCS:
            await client.hset(key, name, str(env.warcs / name))

    async def cleanup() -> None:
        async with redis_client(server) as client:
            await delete_prefix(client, key)

    env.add_cleanup(cleanup)
    return _warc_built(env, _warc_loader(env, f"warc-index+{server}/0/{key}"))


async def broken_warc_redis(env: LoaderEnv) -> Built:
    location = f"warc-index+redis://127.0.0.1:{free_port()}/0/closed:port"
    return _warc_built(env, _warc_loader(env, location))


async def _store_built(env: LoaderEnv, settings: StoreSettings) -> tuple[Store, Built]:
    store = await Store.open(settings)
    env.add_cleanup(store.close)
    for name in CONTRACT_WARCS:
        await store.add_warc(env.warcs / name)
    query = CaptureQuery(url="-", key="", end_key="~")  # everything
    index = [tagged(record) async for record in store.lookup(query)]
    loader = StoreSource.for_store(store, name=NAME).resource_loaders()[0]
    own = pick(index, SAMPLE_CAPTURES)
    return store, Built(loader, own, other_member(own) + no_file(), make_finder(index))


def _store_settings(env: LoaderEnv, folder: str) -> StoreSettings:
    return StoreSettings(root=str(env.tmp_path / folder), fsync="never")


async def build_store(env: LoaderEnv) -> Built:
    return (await _store_built(env, _store_settings(env, "store")))[1]


async def broken_store(env: LoaderEnv) -> Built:
    store, built = await _store_built(env, _store_settings(env, "broken-store"))
    for path in warc_files(store.warc_dir):
        path.unlink()  # the index still names them
    return built


async def _s3_upload(env: LoaderEnv, names: tuple[str, ...]) -> S3StorageConfig:
    """A fresh prefix of the loader bucket holding ``names`` from the sample archive."""
    s3: SeaweedFS = env.fixture("s3_env")
    config = S3StorageConfig(
        bucket=env.fixture("loader_bucket"), endpoint=s3.endpoint, prefix=f"{uuid.uuid4().hex}/"
    )
    storage = await S3Storage.open("upload", config)
    try:
        for name in names:
            data = (env.warcs / name).read_bytes()
            await storage.put(
                name, _pieces(data), size=len(data), sha256=hashlib.sha256(data).hexdigest()
            )
    finally:
        await storage.close()
    return config


async def _pieces(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _s3_loader(env: LoaderEnv, config: S3StorageConfig) -> WarcLoader:
    location = f"s3+{config.endpoint}/{config.bucket}/{config.prefix}"
    return _warc_loader(env, location)


async def build_warc_s3(env: LoaderEnv) -> Built:
    return _warc_built(env, _s3_loader(env, await _s3_upload(env, CONTRACT_WARCS)))


async def broken_warc_s3(env: LoaderEnv) -> Built:
    return _warc_built(env, _s3_loader(env, await _s3_upload(env, ())))


async def _replicated_store(env: LoaderEnv, folder: str, *, replicate: bool) -> Built:
    """A store whose files are replicated to S3 (or not), then lost at the primary."""
    s3: SeaweedFS = env.fixture("s3_env")
    config = S3StorageConfig(
        bucket=env.fixture("loader_bucket"), endpoint=s3.endpoint, prefix=f"{uuid.uuid4().hex}/"
    )
    spec = StorageSpec(type="s3", config=config, path="store.storages.s3")
    settings = StoreSettings(
        root=str(env.tmp_path / folder),
        fsync="never",
        storages={"s3": spec},
        retention=RetentionPolicy(copies=2),
    )
    store, built = await _store_built(env, settings)
    if replicate:
        db, ctx = await open_jobs(store.layout.root, settings, None, [BATCH, COPY], "test")
        try:
            objects = await work_pass(ctx, await enqueue_pass(store.replicas, ctx))
        finally:
            await db.close()
        report = report_of(objects)
        assert report.ok, report
        assert report.outcomes == {"copied": len(CONTRACT_WARCS)}, report
    for path in warc_files(store.warc_dir):
        path.unlink()  # every record now loads from S3
    return built


async def build_store_replica(env: LoaderEnv) -> Built:
    return await _replicated_store(env, "store", replicate=True)


async def broken_store_replica(env: LoaderEnv) -> Built:
    return await _replicated_store(env, "broken-store", replicate=False)


def _replay_loader(env: LoaderEnv) -> ReplayLoader:
    return ReplayLoader(name=NAME, clients=env.clients, spool_memory_bytes=SMALL_SPOOL_BYTES)


def _replay_foreign(own: list[CdxRecord], env: LoaderEnv) -> list[CdxRecord]:
    return other_member(own) + pick(env.index(), SAMPLE_CAPTURES[:1])


async def build_replay(env: LoaderEnv) -> Built:
    server = await env.aiohttp_server(replay_archive_app(), host="127.0.0.1")
    own = []
    for host, payload in (("archived", PAYLOAD), ("plain", PAYLOAD), ("gzip", GZIPPED)):
        url, timestamp = f"http://{host}.example/page", "20140101000000"
        load_url = str(server.make_url(f"/web/{timestamp}id_/{url}"))
        own.append(remote_capture(url, timestamp, load_url, digest=sha1_base32(payload)))
    return Built(_replay_loader(env), own, _replay_foreign(own, env))


async def broken_replay(env: LoaderEnv) -> Built:
    url = "http://archived.example/page"
    load_url = f"http://127.0.0.1:{free_port()}/web/20140101000000id_/{url}"
    return Built(_replay_loader(env), [remote_capture(url, "20140101000000", load_url)])


def _pywb_captures(env: LoaderEnv, keys: tuple[tuple[str, str], ...]) -> list[CdxRecord]:
    base: str = env.fixture("pywb_wayback")
    own = []
    for sample in pick(env.index(), keys):
        load_url = f"{base}/pywb/{sample.timestamp}id_/{sample.url}"
        own.append(remote_capture(sample.url, sample.timestamp, load_url, digest=sample.digest))
    return own


async def build_replay_pywb(env: LoaderEnv) -> Built:
    own = _pywb_captures(env, SAMPLE_CAPTURES)
    return Built(_replay_loader(env), own, _replay_foreign(own, env))


async def broken_replay_pywb(env: LoaderEnv) -> Built:
    # pywb holds no capture of this URL: it answers its own 404 page, not a memento.
    base: str = env.fixture("pywb_wayback")
    url, timestamp = "http://nothere.example/", "20140126200624"
    load_url = f"{base}/pywb/{timestamp}id_/{url}"
    return Built(_replay_loader(env), [remote_capture(url, timestamp, load_url)])


def _live_loader(env: LoaderEnv) -> LiveLoader:
    loader = LiveLoader(
        NAME, clients=env.clients, allow_private_networks=True, spool_memory_bytes=SMALL_SPOOL_BYTES
    )
    env.add_cleanup(loader.aclose)
    return loader


async def build_live(env: LoaderEnv) -> Built:
    running = live_web()
    web_server = await running.__aenter__()

    async def stop() -> None:
        await running.__aexit__(None, None, None)

    env.add_cleanup(stop)
    own = [
        remote_capture(url, "20260101000000", url, is_live="true")
        for url in map(web_server.url, ("/page", "/chunked", "/gzip", "/big?size=300000"))
    ]
    not_live = remote_capture(web_server.url("/page"), "20140101000000", web_server.url("/page"))
    foreign = [*other_member(own), not_live, *pick(env.index(), SAMPLE_CAPTURES[:1])]
    return Built(_live_loader(env), own, foreign)


async def broken_live(env: LoaderEnv) -> Built:
    url = f"http://127.0.0.1:{free_port()}/page"
    return Built(_live_loader(env), [remote_capture(url, "20260101000000", url, is_live="true")])


async def _wacz_built(env: LoaderEnv, path: str, captures_from: str | None = None) -> Built:
    """The loader of a WACZ source over ``path``; its captures as the source finds them
    (in the WACZ at ``captures_from`` when given: a damaged copy cannot be searched)."""
    everything = CaptureQuery(url="-", key="", end_key="~")
    index: list[CdxRecord] = []
    searched = WaczSource.from_config(
        WaczSourceConfig(path=captures_from or path), name=NAME, clients=env.clients
    )
    async for record in searched.lookup(everything):
        record.tag(NAME)  # as the aggregator does: source "contract:sample.wacz"
        index.append(record)
    source = searched
    if captures_from is not None:
        await searched.aclose()
        config = WaczSourceConfig(path=path)
        source = WaczSource.from_config(config, name=NAME, clients=env.clients)
    env.add_cleanup(source.aclose)
    own = [next(r for r in index if (r.urlkey, r.timestamp) == key) for key in SAMPLE_CAPTURES]
    loader = source.resource_loaders()[0]
    return Built(loader, own, other_member(own) + no_file(), make_finder(index))


async def build_wacz(env: LoaderEnv) -> Built:
    return await _wacz_built(env, str(env.fixture("sample_wacz")))


def _damaged_wacz(env: LoaderEnv, fixture: str = "sample_wacz", entry: str = "") -> Path:
    """A copy of the WACZ of ``fixture`` with one byte of ``entry`` (its WARC) flipped."""
    wacz: Path = env.fixture(fixture)
    (env.tmp_path / "damaged").mkdir()
    damaged = env.tmp_path / "damaged" / wacz.name
    return flip_byte(wacz, entry or "archive/example.warc.gz", damaged)


async def broken_wacz(env: LoaderEnv) -> Built:
    return await _wacz_built(env, str(_damaged_wacz(env)), str(env.fixture("sample_wacz")))


async def _wacz_s3(env: LoaderEnv, wacz: Path) -> str:
    s3: SeaweedFS = env.fixture("s3_env")
    prefix = f"{uuid.uuid4().hex}/"
    await upload(s3.endpoint, env.fixture("wacz_bucket"), prefix, [wacz])
    return f"s3+{s3.endpoint}/wacz/{prefix}{wacz.name}"


async def build_wacz_s3(env: LoaderEnv) -> Built:
    return await _wacz_built(env, await _wacz_s3(env, env.fixture("sample_wacz")))


async def broken_wacz_s3(env: LoaderEnv) -> Built:
    path = await _wacz_s3(env, _damaged_wacz(env))
    return await _wacz_built(env, path, str(env.fixture("sample_wacz")))


# The gateway's own export of the sample WARCs (conftest ``exported_wacz``): one
# ``archive/data.warc.gz`` holding each record once, its index lines naming their
# places in it. The checks are the same: each record parses whole at its line's
# offset and length, with the WARC headers, date and payload digest of the WARC
# it was exported from (WaczExport copies records as stored).
_EXPORT_WARC: Final = "archive/data.warc.gz"


async def build_wacz_export(env: LoaderEnv) -> Built:
    return await _wacz_built(env, str(env.fixture("exported_wacz")))


async def broken_wacz_export(env: LoaderEnv) -> Built:
    damaged = _damaged_wacz(env, "exported_wacz", _EXPORT_WARC)
    return await _wacz_built(env, str(damaged), str(env.fixture("exported_wacz")))


async def build_wacz_export_s3(env: LoaderEnv) -> Built:
    return await _wacz_built(env, await _wacz_s3(env, env.fixture("exported_wacz")))


async def broken_wacz_export_s3(env: LoaderEnv) -> Built:
    path = await _wacz_s3(env, _damaged_wacz(env, "exported_wacz", _EXPORT_WARC))
    return await _wacz_built(env, path, str(env.fixture("exported_wacz")))


#: Checks the live loader cannot satisfy, and why.
LIVE_CANNOT: Final = {
    "index_digest": "a live capture is made before its fetch: the index has no digest",
}

#: Every parameter of ``loader_under_test``: id -> Kind (see the module docstring).
LOADER_KINDS: Final[dict[str, Kind]] = {
    "warc-local": Kind(WarcLoader, build_warc_local, broken_warc_local, ArchiveFileNotFound),
    "warc-http": Kind(WarcLoader, build_warc_http, broken_warc_http, LoadError),
    "warc-path-index": Kind(
        WarcLoader, build_warc_path_index, broken_warc_path_index, ArchiveFileNotFound
    ),
    "warc-redis": Kind(WarcLoader, build_warc_redis, broken_warc_redis, PlaceUnreachable),
    "warc-s3": Kind(WarcLoader, build_warc_s3, broken_warc_s3, ArchiveFileNotFound),
    # The store's own file at none of its places: its failure, not "not archived".
    "store": Kind(StoreRecordLoader, build_store, broken_store, ArchiveUnavailable),
    "store-replica": Kind(
        StoreRecordLoader, build_store_replica, broken_store_replica, ArchiveUnavailable
    ),
    "replay": Kind(ReplayLoader, build_replay, broken_replay, UpstreamUnreachable),
    "replay-pywb": Kind(
        ReplayLoader, build_replay_pywb, broken_replay_pywb, UpstreamStatusError, peer=True
    ),
    "live": Kind(LiveLoader, build_live, broken_live, LoadError, cannot=LIVE_CANNOT),
    # A WACZ whose WARC entry fails its datapackage digest is refused whole.
    "wacz": Kind(WaczLoader, build_wacz, broken_wacz, ArchiveRefused),
    "wacz-s3": Kind(WaczLoader, build_wacz_s3, broken_wacz_s3, ArchiveRefused),
    "wacz-export": Kind(WaczLoader, build_wacz_export, broken_wacz_export, ArchiveRefused),
    "wacz-export-s3": Kind(WaczLoader, build_wacz_export_s3, broken_wacz_export_s3, ArchiveRefused),
}


# ------------------------------------------------------------------- fixtures
def _params() -> list[Any]:
    return [
        pytest.param(kind_id, marks=[pytest.mark.peer] if kind.peer else [], id=kind_id)
        for kind_id, kind in LOADER_KINDS.items()
    ]


@pytest.fixture(params=_params())
async def loader_under_test(
    request: pytest.FixtureRequest, sample_dir: Path, tmp_path: Path, aiohttp_server: AiohttpServer
) -> AsyncIterator[Subject]:
    """A loader of the entry's type with its own and foreign captures (see module doc)."""
    kind = LOADER_KINDS[request.param]
    env = LoaderEnv(sample_dir, tmp_path, SharedClients(), aiohttp_server, request)
    await env.clients.start()
    built: Built | None = None
    try:
        built = await kind.build(env)
        assert isinstance(built.loader, kind.loader_type)
        assert built.own, "an entry loads at least one capture"
        yield Subject(request.param, kind, built, env)
    finally:
        try:
            if built is not None:
                await close_loader(built.loader)
        finally:
            for cleanup in reversed(env.cleanups):
                await cleanup()
            await env.clients.close()


# ---------------------------------------------------------------------- guards
def test_every_loader_type_has_a_contract_entry() -> None:
    covered = {kind.loader_type for kind in LOADER_KINDS.values()}
    registered = set(LOADER_TYPES.values())
    assert len(registered) >= 3
    missing = sorted(
        cls.__qualname__ for cls in (registered | loader_classes_in_gateway()) - covered
    )
    assert not missing, f"add a LOADER_KINDS entry for {missing} (see the module docstring)"
    for kind_id, kind in LOADER_KINDS.items():
        assert set(kind.cannot) <= set(CHECKS), kind_id


def test_loader_types_lists_every_loader_class() -> None:
    unlisted = loader_classes_in_gateway() - set(LOADER_TYPES.values())
    assert not unlisted, f"add to LOADER_TYPES: {sorted(c.__qualname__ for c in unlisted)}"


# ---------------------------------------------------------------------- checks
def test_accepts_its_own_captures_and_no_foreign_one(loader_under_test: Subject) -> None:
    subject = loader_under_test
    subject.needs("accepts")
    for capture in subject.built.own:
        assert subject.loader.accepts(capture), capture
    assert subject.built.foreign, "an entry lists captures of other loaders"
    for capture in subject.built.foreign:
        assert not subject.loader.accepts(capture), capture


async def test_a_load_is_exactly_one_warc_record(loader_under_test: Subject) -> None:
    subject = loader_under_test
    subject.needs("record")
    for capture in subject.built.own:
        loaded, data = await subject.load_all(capture)
        served = parse_one(data)
        assert served.headers["WARC-Target-URI"] == loaded.target_uri == capture.url
        assert int(served.headers["Content-Length"]) == len(data) - len(loaded.warc_headers)
        assert served.block_length == len(data) - len(loaded.warc_headers), capture
        assert served.rec_type in ("response", "resource", "revisit", "request"), capture


async def test_content_length_is_the_byte_count(loader_under_test: Subject) -> None:
    subject = loader_under_test
    subject.needs("content_length")
    known = 0
    for capture in subject.built.own:
        loaded, data = await subject.load_all(capture)
        if loaded.content_length is not None:
            assert loaded.content_length == len(data), capture
            known += 1
    assert known, f"{subject.id}: no content_length at all; declare cannot= for it"


async def test_warc_date_is_the_memento_datetime(loader_under_test: Subject) -> None:
    subject = loader_under_test
    subject.needs("warc_date")
    for capture in subject.built.own:
        loaded, data = await subject.load_all(capture)
        assert _WARC_DATE.match(loaded.warc_date), loaded.warc_date
        assert parse_one(data).headers["WARC-Date"] == loaded.warc_date
        assert iso_date_to_timestamp(loaded.warc_date) == loaded.capture.timestamp, capture


async def test_payload_digest_matches_the_payload_served(loader_under_test: Subject) -> None:
    subject = loader_under_test
    subject.needs("payload_digest")
    checked = 0
    for capture in subject.built.own:
        _, data = await subject.load_all(capture)
        served = parse_one(data)
        label = served.headers.get("WARC-Payload-Digest")
        if label is not None:
            assert verify_digest(label, served.payload), (capture, label)
            checked += 1
    assert checked, f"{subject.id}: no WARC-Payload-Digest at all; declare cannot= for it"


async def test_payload_has_the_index_digest(loader_under_test: Subject) -> None:
    subject = loader_under_test
    subject.needs("index_digest")
    for capture in subject.built.own:
        assert capture.digest not in ("", "-"), f"{capture} needs a digest for this check"
        _, data = await subject.load_all(capture)
        bare = capture.digest.rpartition(":")[2]
        assert verify_digest(f"sha1:{bare}", parse_one(data).payload), capture


async def test_aclose_is_idempotent_and_releases_everything(loader_under_test: Subject) -> None:
    subject = loader_under_test
    subject.needs("aclose")
    for capture in subject.built.own:  # warm up: pools, sessions, caches
        await subject.load_all(capture)
    before = baseline()
    for _ in range(3):
        for capture in subject.built.own:
            loaded, _ = await subject.load_all(capture)
            await loaded.aclose()  # the second call
            unread = await subject.load(capture)
            await unread.aclose()
            await unread.aclose()
    await assert_released(before, f"{subject.id} after aclose()")
    await close_loader(subject.loader)
    await close_loader(subject.loader)


async def test_closing_after_the_first_chunk_leaks_nothing(loader_under_test: Subject) -> None:
    subject = loader_under_test
    subject.needs("early_close")
    sizes = [len((await subject.load_all(capture))[1]) for capture in subject.built.own]
    before = baseline()
    cut_short = 0
    for _ in range(3):
        for capture, size in zip(subject.built.own, sizes, strict=True):
            loaded = await subject.load(capture)
            async for chunk in loaded.body:
                head = len(loaded.warc_headers) + len(loaded.http_headers)
                cut_short += head + len(chunk) < size
                break
            await loaded.aclose()
    assert cut_short, f"{subject.id}: every body was one chunk; add a larger capture"
    await assert_released(before, f"{subject.id} after reading one chunk")
    # The loader still works afterwards.
    loaded, data = await subject.load_all(subject.built.own[-1])
    parse_one(data)


async def test_a_broken_loader_raises_a_load_error(loader_under_test: Subject) -> None:
    subject = loader_under_test
    subject.needs("failure")
    broken = await subject.kind.broken(subject.env)
    try:
        before = baseline()
        for attempt in range(3):
            if attempt == 1:  # the first round warmed up pools (a pooled keep-alive)
                before = baseline()
            for capture in broken.own:
                assert broken.loader.accepts(capture), capture
                context = LoadContext(request_url=capture.url, find_original=broken.find_original)
                with pytest.raises(LoadError) as caught:
                    await load_and_drain(broken.loader, capture, context)
                assert isinstance(caught.value, subject.kind.failure), repr(caught.value)
                assert caught.value.message
        await assert_released(before, f"{subject.id} after failed loads")
    finally:
        await close_loader(broken.loader)
