"""The IndexSource contract (gateway.sources.base), checked for every source type.

Each parameter of the ``source_under_test`` fixture builds a source of one
type holding the SAME captures: every line of the sample archive's
``cdxj/iana.cdxj`` and ``cdxj/example.cdxj``. The suite checks, over many
queries (``exact``, ``prefix``, ``host`` and ``domain`` for every URL of those
files, their hosts and domains, and URLs that are absent):

``captures``
    the (urlkey, timestamp, url, digest) multiset equals a linear scan of the
    two files for ``[query.key, query.end_key)``;
``order``
    records come sorted by (urlkey, timestamp) ascending;
``range``
    every record lies inside ``[query.key, query.end_key)``;
``empty_range``
    a query whose ``key >= end_key`` yields nothing;
``concurrency``
    concurrent lookups answer as sequential ones;
``early_close``
    closing a lookup after its first record leaves the source usable;
``describe``
    ``describe()`` is one non-empty line;
``aclose``
    ``aclose()`` may be called twice;
``failure``
    a broken source of the type (closed port, missing file, wrong data)
    raises the expected :class:`~gateway.errors.SourceError` subclass on
    lookup, never an empty answer;
``widened``
    a widened (fuzzy) prefix lookup answers as the same lookup unflagged, or,
    for the types in :data:`NOT_WIDENING`, with nothing.

Adding a source type
====================

1. Write ``async def build_<id>(env: ContractEnv) -> IndexSource`` returning
   a source of the type that holds exactly ``env.lines`` (both files' lines,
   sorted bytewise; ``env.files`` are the two files), built with the type's
   ``from_config(..., clients=env.clients)``. Start what it needs with
   ``await env.aiohttp_server(app)`` (a real aiohttp server on 127.0.0.1) or
   ``env.fixture("redis_server")``; undo anything you create outside
   ``env.tmp_path`` with ``env.add_cleanup(async_callable)``.
2. Write ``async def broken_<id>(env: ContractEnv) -> IndexSource`` returning
   a source of the type that cannot answer (a closed port: ``free_port()``).
3. Add ONE line to :data:`CONTRACT_KINDS`::

       "memento": Kind("memento", build_memento, broken_memento, SourceUnavailable),

   The first field is the ``SOURCE_TYPES`` name (several parameters may test
   one type, as ``file``, ``directory`` and ``gzip`` do); the last the
   SourceError subclass the broken source must raise.
4. A type that cannot represent something (the live web has no fixed set of
   captures) passes ``cannot={"captures": "why", ...}`` with check names from
   :data:`CHECKS`: those checks are *skipped* for it with that reason, never
   passed silently.

:func:`test_every_source_type_has_a_contract_parameter` fails while a type in
``SOURCE_TYPES`` has no parameter here.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import secrets
import shutil
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
from aiohttp.test_utils import TestServer

from gateway.access.policy import AccessPolicy
from gateway.access.settings import AccessConfig
from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.query import MATCH_TYPES, CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import SourceBadAnswer, SourceError, SourceUnavailable
from gateway.index.group import IndexGroup
from gateway.index.zipnum_build import BuildSettings
from gateway.index.zipnum_publish import S3Target, build_cluster
from gateway.loaders.base import ResourceLoader
from gateway.sources import SOURCE_SHORTHANDS, SOURCE_TYPES
from gateway.sources.base import IndexSource
from gateway.sources.cdx_api import CdxApiConfig, CdxApiSource
from gateway.sources.cdxj_file import CdxjFileSource, FileSourceConfig
from gateway.sources.live import LiveSource, LiveSourceConfig
from gateway.sources.memento_api import MementoSource, MementoSourceConfig
from gateway.sources.redis_zset import RedisIndexSource, RedisSourceConfig
from gateway.sources.store import StoreSource, StoreSourceConfig
from gateway.sources.wacz import WaczSource, WaczSourceConfig
from gateway.sources.zipnum import ZipNumSource, ZipNumSourceConfig
from gateway.store import Store, StoreSettings
from tests.access.acl_oracle import OracleRule
from tests.access.acl_oracle import decide as oracle_decide
from tests.conftest import free_port
from tests.sources.cdx_support import cdx_server_app
from tests.sources.conftest import collect, linear_scan
from tests.sources.memento_archive import MementoArchive
from tests.sources.redis_support import delete_prefix, redis_client, unique_prefix, zadd_lines
from tests.sources.zipnum_support import write_zipnum
from tests.wacz_support import flip_byte, upload

#: The checks of this suite; ``Kind.cannot`` keys must be among them.
CHECKS: Final = (
    "captures",
    "order",
    "range",
    "empty_range",
    "concurrency",
    "early_close",
    "describe",
    "aclose",
    "failure",
)
#: Source types that answer a widened (fuzzy) lookup with nothing, as pywb's
#: Memento and live index sources do (gateway.index.fuzzy).
NOT_WIDENING: Final = frozenset({"live", "memento"})
#: The sample index files every parameter's source holds.
CONTRACT_FILES: Final = ("iana.cdxj", "example.cdxj")
#: URLs that are in neither file (still queried with every match type).
ABSENT_URLS: Final = (
    "http://example.net/",
    "http://www.iana.org/no/such/page",
    "http://iana.org.example/",
    "http://aaa.invalid/",
    "http://zzz.invalid/",
)

AiohttpServer = Callable[..., Awaitable[TestServer]]
Cleanup = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class ContractEnv:
    """What a builder gets: the captures to hold and ways to start real servers."""

    files: tuple[Path, ...]
    lines: list[bytes]
    tmp_path: Path
    clients: SharedClients
    aiohttp_server: AiohttpServer
    request: pytest.FixtureRequest
    cleanups: list[Cleanup] = field(default_factory=list)

    def fixture(self, name: str) -> Any:
        """A synchronous fixture by name (e.g. ``redis_server``), created on demand."""
        return self.request.getfixturevalue(name)

    def add_cleanup(self, cleanup: Cleanup) -> None:
        """Run ``await cleanup()`` after the test (last added, first run)."""
        self.cleanups.append(cleanup)


Builder = Callable[[ContractEnv], Awaitable[IndexSource]]


@dataclass(frozen=True, slots=True)
class Kind:
    """One contract parameter: a source type, how to build it and how it fails."""

    source_type: str
    build: Builder
    broken: Builder | None
    failure: type[SourceError] = SourceError
    cannot: Mapping[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------- builders
NAME: Final = "contract"
#: Members per ZRANGEBYLEX round trip for the Redis parameters.
REDIS_PAGE_SIZE: Final = 16


def _file_source(path: Path, env: ContractEnv) -> IndexSource:
    config = FileSourceConfig(path=str(path))
    return CdxjFileSource.from_config(config, name=NAME, clients=env.clients)


def _write_merged(env: ContractEnv, name: str) -> Path:
    path = env.tmp_path / name
    data = b"\n".join(env.lines) + b"\n"
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


async def build_file(env: ContractEnv) -> IndexSource:
    return _file_source(_write_merged(env, "both.cdxj"), env)


async def broken_file(env: ContractEnv) -> IndexSource:
    path = _write_merged(env, "gone.cdxj")
    source = _file_source(path, env)
    path.unlink()
    return source


async def build_directory(env: ContractEnv) -> IndexSource:
    folder = env.tmp_path / "indexes"
    folder.mkdir()
    for path in env.files:
        shutil.copy(path, folder / path.name)
    return _file_source(folder, env)


async def broken_directory(env: ContractEnv) -> IndexSource:
    folder = env.tmp_path / "gone"
    folder.mkdir()
    shutil.copy(env.files[0], folder / env.files[0].name)
    source = _file_source(folder, env)
    shutil.rmtree(folder)
    return source


async def build_gzip(env: ContractEnv) -> IndexSource:
    return _file_source(_write_merged(env, "both.cdxj.gz"), env)


async def broken_gzip(env: ContractEnv) -> IndexSource:
    path = _write_merged(env, "cut.cdxj.gz")
    path.write_bytes(path.read_bytes()[:40])  # cut inside the first deflate block
    return _file_source(path, env)


def _zipnum_source(summary: Path, env: ContractEnv) -> IndexSource:
    config = ZipNumSourceConfig(path=str(summary), max_blocks=3)
    return ZipNumSource.from_config(config, name=NAME, clients=env.clients)


async def build_zipnum(env: ContractEnv) -> IndexSource:
    # Blocks of 7 lines, 4 blocks a shard, read 3 at a time: answers cross all three.
    return _zipnum_source(write_zipnum(env.lines, env.tmp_path), env)


async def broken_zipnum(env: ContractEnv) -> IndexSource:
    summary = write_zipnum(env.lines, env.tmp_path)
    source = _zipnum_source(summary, env)
    for shard in env.tmp_path.glob("cluster-*.cdx.gz"):
        shard.unlink()
    return source


async def _built_cluster(env: ContractEnv, folder: str, s3: S3Target | None = None) -> Path:
    """``gateway zipnum build`` of both files (blocks of 7 lines, shards of 2 kB)."""
    settings = BuildSettings(lines_per_block=7, shard_bytes=2048, fsync=False)
    out = env.tmp_path / folder
    report = await asyncio.to_thread(build_cluster, list(env.files), out, settings, s3=s3)
    return report.summary


async def build_zipnum_built(env: ContractEnv) -> IndexSource:
    # Built by the gateway: a few blocks per shard, read 3 blocks at a time.
    return _zipnum_source(await _built_cluster(env, "built"), env)


async def broken_zipnum_built(env: ContractEnv) -> IndexSource:
    summary = await _built_cluster(env, "built-broken")
    source = _zipnum_source(summary, env)
    for generation in summary.parent.glob("gen-*"):
        shutil.rmtree(generation)
    return source


async def _s3_cluster(env: ContractEnv, folder: str) -> Path:
    """The cluster of :func:`_built_cluster` with its shards on SeaweedFS."""
    seaweedfs = env.fixture("s3_env")
    if seaweedfs.endpoint not in _S3_BUCKETS:  # one bucket per server: new ones are slow to settle
        await seaweedfs.create_bucket(ZIPNUM_BUCKET)
        _S3_BUCKETS.add(seaweedfs.endpoint)
    prefix = f"clusters-{secrets.token_hex(4)}/"
    base = f"s3+{seaweedfs.endpoint}/{ZIPNUM_BUCKET}/{prefix}"
    target = S3Target(ZIPNUM_BUCKET, prefix, seaweedfs.endpoint, base)
    return await _built_cluster(env, folder, target)


ZIPNUM_BUCKET: Final = "zipnum-contract"
_S3_BUCKETS: set[str] = set()


async def build_zipnum_s3(env: ContractEnv) -> IndexSource:
    return _zipnum_source(await _s3_cluster(env, "on-s3"), env)


async def broken_zipnum_s3(env: ContractEnv) -> IndexSource:
    # The objects are there, the S3 endpoint is not.
    summary = await _s3_cluster(env, "on-s3-broken")
    loc = summary.with_suffix(".loc")
    endpoint = env.fixture("s3_env").endpoint.removeprefix("http://")
    loc.write_text(loc.read_text().replace(endpoint, f"127.0.0.1:{free_port()}"))
    return _zipnum_source(summary, env)


async def _http_cluster(env: ContractEnv, folder: str) -> Path:
    """The cluster of :func:`_built_cluster`, its location file naming the shards by
    URL on an aiohttp server (static files: ``Range`` answered with 206)."""
    from aiohttp import web

    summary = await _built_cluster(env, folder)
    app = web.Application()
    app.router.add_static("/shards/", summary.parent)
    server = await env.aiohttp_server(app)
    loc = summary.with_suffix(".loc")
    base = str(server.make_url("/shards/"))
    loc.write_text(
        "".join(
            f"{part}\t{base}{path}\n"
            for part, path in (line.split("\t") for line in loc.read_text().splitlines())
        )
    )
    return summary


async def build_zipnum_http(env: ContractEnv) -> IndexSource:
    return _zipnum_source(await _http_cluster(env, "on-http"), env)


async def broken_zipnum_http(env: ContractEnv) -> IndexSource:
    summary = await _http_cluster(env, "on-http-broken")
    for generation in summary.parent.glob("gen-*"):
        shutil.rmtree(generation)  # the server answers 404 to every range
    return _zipnum_source(summary, env)


def _redis_source(env: ContractEnv, url: str) -> IndexSource:
    # Small pages, so that most answers cross page boundaries (default: 1000).
    config = RedisSourceConfig(url=url, page_size=REDIS_PAGE_SIZE)
    return RedisIndexSource.from_config(config, name=NAME, clients=env.clients)


async def _redis_keys(env: ContractEnv, groups: Mapping[str, list[bytes]], kind: str) -> str:
    """Load ``{key suffix: lines}`` under a fresh prefix (deleted afterwards)."""
    server: str = env.fixture("redis_server")
    prefix = unique_prefix(kind)
    async with redis_client(server) as client:
        for suffix, lines in groups.items():
            if lines:
                await zadd_lines(client, f"{prefix}:{suffix}", lines)
            else:
                await client.hset(f"{prefix}:{suffix}", "not", "a sorted set")

    async def cleanup() -> None:
        async with redis_client(server) as client:
            await delete_prefix(client, prefix)

    env.add_cleanup(cleanup)
    return f"{server}/0/{prefix}"


async def build_redis(env: ContractEnv) -> IndexSource:
    base = await _redis_keys(env, {"cdxj": env.lines}, "contract")
    return _redis_source(env, f"{base}:cdxj")


async def broken_redis(env: ContractEnv) -> IndexSource:
    return _redis_source(env, f"redis://127.0.0.1:{free_port()}/0/closed:port")


async def build_redis_template(env: ContractEnv) -> IndexSource:
    groups = {path.name: path.read_bytes().splitlines() for path in env.files}
    base = await _redis_keys(env, groups, "contract")
    return _redis_source(env, f"{base}:*")


async def broken_redis_template(env: ContractEnv) -> IndexSource:
    # One key matching the template is a hash: the lookup must say so.
    base = await _redis_keys(env, {"a": env.lines, "b": []}, "contract")
    return _redis_source(env, f"{base}:*")


async def build_live(env: ContractEnv) -> IndexSource:
    # The live web holds every URL "now": it cannot hold env.lines (see LIVE_CANNOT).
    return LiveSource.from_config(LiveSourceConfig(), name=NAME, clients=env.clients)


#: Checks the live web cannot satisfy, and why.
LIVE_CANNOT: Final = {
    "captures": "the live web holds every URL once, at the current time, not the sample files",
    "order": "an answer holds at most one record, so its order cannot be observed",
    "concurrency": "answers carry the current time, which may differ between two runs",
    "early_close": "only exact lookups are answered, with one record: none has a second record",
    "failure": "a lookup never touches the network, so the live source has no failing variant",
}


async def _cdx_source(env: ContractEnv, path: str) -> IndexSource:
    server = await env.aiohttp_server(cdx_server_app(env.lines))
    config = CdxApiConfig(api_url=str(server.make_url(path)))
    return CdxApiSource.from_config(config, name=NAME, clients=env.clients)


async def build_cdx(env: ContractEnv) -> IndexSource:
    return await _cdx_source(env, "/cdxj/cdx")


async def broken_cdx(env: ContractEnv) -> IndexSource:
    config = CdxApiConfig(api_url=f"http://127.0.0.1:{free_port()}/cdx")
    return CdxApiSource.from_config(config, name=NAME, clients=env.clients)


async def build_cdx_ia_json(env: ContractEnv) -> IndexSource:
    return await _cdx_source(env, "/iajson/cdx")


async def broken_cdx_ia_json(env: ContractEnv) -> IndexSource:
    return await _cdx_source(env, "/garbage/cdx")


async def _open_store(env: ContractEnv, folder: str) -> Store:
    store = await Store.open(StoreSettings(root=str(env.tmp_path / folder), fsync="never"))
    env.add_cleanup(store.close)
    return store


class _BareDigests:
    """The ``$store`` source, its digests written as the sample files write them.

    The store indexes the WARC files it imports itself and labels payload
    digests ``sha1:BASE32``, as WARC writers and cdxj-indexer do; the sample
    indexes carry the bare BASE32 of the same SHA-1. Only the label differs,
    so this view strips it and passes everything else through unchanged.
    """

    def __init__(self, source: IndexSource) -> None:
        self.source = source
        self.name = source.name

    async def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        records = self.source.lookup(query)
        try:
            async for record in records:
                digest = record.fields.get("digest")
                if digest is not None:
                    record.fields["digest"] = digest.removeprefix("sha1:")
                yield record
        finally:
            await records.aclose()  # type: ignore[attr-defined]

    def describe(self) -> str:
        return self.source.describe()

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        return self.source.resource_loaders()

    async def aclose(self) -> None:
        await self.source.aclose()


async def build_store(env: ContractEnv) -> IndexSource:
    # The store imports the WARC files the two sample indexes describe.
    store = await _open_store(env, "store")
    for path in env.files:
        await store.add_warc(path.parent.parent / "warcs" / f"{path.stem}.warc.gz")
    env.clients.store = store
    source = StoreSource.from_config(StoreSourceConfig(), name=NAME, clients=env.clients)
    return _BareDigests(source)


async def broken_store(env: ContractEnv) -> IndexSource:
    # A store closed under the source (its index connection is gone).
    store = await _open_store(env, "closed-store")
    await store.close()
    clients = SharedClients()
    clients.store = store
    return StoreSource.from_config(StoreSourceConfig(), name=NAME, clients=clients)


async def build_memento(env: ContractEnv) -> IndexSource:
    # A Memento archive (aiohttp) serving env.lines as TimeGate, TimeMaps, mementos.
    server = await env.aiohttp_server(MementoArchive.from_cdxj(env.lines).app())
    config = MementoSourceConfig.from_shorthand(f"memento+{server.make_url('/web/')}")
    return MementoSource.from_config(config, name=NAME, clients=env.clients)


async def broken_memento(env: ContractEnv) -> IndexSource:
    config = MementoSourceConfig.from_shorthand(f"memento+http://127.0.0.1:{free_port()}/web/")
    return MementoSource.from_config(config, name=NAME, clients=env.clients)


async def _wacz(env: ContractEnv, path: Path | str) -> IndexSource:
    config = WaczSourceConfig(path=str(path))
    return WaczSource.from_config(config, name=NAME, clients=env.clients)


async def build_wacz(env: ContractEnv) -> IndexSource:
    # py-wacz's index of the two WARCs is the two files' lines (digests spelled sha1:...).
    return await _wacz(env, env.fixture("sample_wacz"))


async def broken_wacz(env: ContractEnv) -> IndexSource:
    damaged = flip_byte(env.fixture("sample_wacz"), "archive/iana.warc.gz", env.tmp_path / "x.wacz")
    return await _wacz(env, damaged)


async def _wacz_on_s3(env: ContractEnv, wacz: Path, files: list[Path]) -> IndexSource:
    """``wacz`` read in place from SeaweedFS (nothing uploaded when ``files`` is empty)."""
    s3 = env.fixture("s3_env")
    prefix = f"{uuid.uuid4().hex}/"
    await upload(s3.endpoint, env.fixture("wacz_bucket"), prefix, files)
    return await _wacz(env, f"s3+{s3.endpoint}/wacz/{prefix}{wacz.name}")


async def build_wacz_s3(env: ContractEnv) -> IndexSource:
    return await _wacz_on_s3(env, env.fixture("sample_wacz"), [env.fixture("sample_wacz")])


async def broken_wacz_s3(env: ContractEnv) -> IndexSource:
    return await _wacz_on_s3(env, env.fixture("sample_wacz"), [])  # no such object


# The gateway's own export of the collection made of the two files and their WARCs
# (conftest ``exported_wacz``): its index is the two files' lines, each naming its
# record's place in the export (data.warc.gz, offset, length) instead of the WARC's.
# The checks compare captures (urlkey, timestamp, url, digest), not places, so the
# export must answer exactly as the files do; the loader suite checks the places.
async def build_wacz_export(env: ContractEnv) -> IndexSource:
    return await _wacz(env, env.fixture("exported_wacz"))


async def broken_wacz_export(env: ContractEnv) -> IndexSource:
    exported = env.fixture("exported_wacz")
    damaged = flip_byte(exported, "archive/data.warc.gz", env.tmp_path / exported.name)
    return await _wacz(env, damaged)


async def build_wacz_export_s3(env: ContractEnv) -> IndexSource:
    return await _wacz_on_s3(env, env.fixture("exported_wacz"), [env.fixture("exported_wacz")])


async def broken_wacz_export_s3(env: ContractEnv) -> IndexSource:
    return await _wacz_on_s3(env, env.fixture("exported_wacz"), [])  # no such object


#: Checks a Memento archive cannot satisfy, and why (tests/sources/test_memento_api.py
#: checks its answers, order included, against archives and real pywb).
MEMENTO_CANNOT: Final = {
    "captures": "Memento answers one URL's TimeMap (no prefix/host/domain) and carries no digest",
    "order": "an answer holds one URL's captures, at most 16 here, fewer than the check needs",
    "early_close": "the check expects a whole domain; a Memento answer holds one URL",
}


#: Every parameter of ``source_under_test``: id -> Kind (see the module docstring).
CONTRACT_KINDS: Final[dict[str, Kind]] = {
    "file": Kind("file", build_file, broken_file, SourceUnavailable),
    "directory": Kind("file", build_directory, broken_directory, SourceUnavailable),
    "gzip": Kind("file", build_gzip, broken_gzip, SourceBadAnswer),
    "redis": Kind("redis", build_redis, broken_redis, SourceUnavailable),
    "redis-template": Kind("redis", build_redis_template, broken_redis_template, SourceBadAnswer),
    "live": Kind("live", build_live, None, cannot=LIVE_CANNOT),
    "memento": Kind("memento", build_memento, broken_memento, SourceUnavailable, MEMENTO_CANNOT),
    "cdx": Kind("cdx", build_cdx, broken_cdx, SourceUnavailable),
    "cdx-ia-json": Kind("cdx", build_cdx_ia_json, broken_cdx_ia_json, SourceBadAnswer),
    "store": Kind("store", build_store, broken_store, SourceUnavailable),
    "zipnum": Kind("zipnum", build_zipnum, broken_zipnum, SourceUnavailable),
    "wacz": Kind("wacz", build_wacz, broken_wacz, SourceUnavailable),
    "wacz-s3": Kind("wacz", build_wacz_s3, broken_wacz_s3, SourceUnavailable),
    "wacz-export": Kind("wacz", build_wacz_export, broken_wacz_export, SourceUnavailable),
    "wacz-export-s3": Kind("wacz", build_wacz_export_s3, broken_wacz_export_s3, SourceUnavailable),
    "zipnum-built": Kind("zipnum", build_zipnum_built, broken_zipnum_built, SourceUnavailable),
    "zipnum-s3": Kind("zipnum", build_zipnum_s3, broken_zipnum_s3, SourceUnavailable),
    "zipnum-http": Kind("zipnum", build_zipnum_http, broken_zipnum_http, SourceUnavailable),
}


# ------------------------------------------------------------------- fixtures
@dataclass(slots=True)
class Subject:
    """The source under test, its parameter and environment."""

    id: str
    kind: Kind
    source: IndexSource
    env: ContractEnv

    def needs(self, check: str) -> None:
        """Skip the test, with the kind's reason, when it cannot pass ``check``."""
        assert check in CHECKS, check
        reason = self.kind.cannot.get(check)
        if reason is not None:
            pytest.skip(f"{self.id} cannot be checked for {check}: {reason}")


@pytest.fixture(scope="session")
def contract_lines(sample_dir: Path) -> list[bytes]:
    """Every line of the contract files, sorted bytewise (as a merged CDXJ file)."""
    lines: list[bytes] = []
    for name in CONTRACT_FILES:
        lines.extend(line for line in (sample_dir / "cdxj" / name).read_bytes().splitlines())
    return sorted(lines)


@pytest.fixture(scope="session")
def contract_queries(contract_lines: list[bytes]) -> list[CaptureQuery]:
    """Exact, prefix, host and domain queries over every URL of the files, and absent ones."""
    urls = sorted({CdxRecord.parse(line).url for line in contract_lines}) + list(ABSENT_URLS)
    urls += ["iana.org", "example.com", "org", "com", "http://www.iana.org/_css/"]
    queries = []
    for url in urls:
        for match_type in MATCH_TYPES:
            queries.append(CaptureQuery.for_url(url, match_type=match_type))
    return queries


@pytest.fixture(params=list(CONTRACT_KINDS))
async def source_under_test(
    request: pytest.FixtureRequest,
    sample_dir: Path,
    tmp_path: Path,
    contract_lines: list[bytes],
    aiohttp_server: AiohttpServer,
) -> AsyncIterator[Subject]:
    """A source of the parameter's type holding the contract files' captures."""
    kind = CONTRACT_KINDS[request.param]
    env = ContractEnv(
        files=tuple(sample_dir / "cdxj" / name for name in CONTRACT_FILES),
        lines=contract_lines,
        tmp_path=tmp_path,
        clients=SharedClients(),
        aiohttp_server=aiohttp_server,
        request=request,
    )
    await env.clients.start()
    source: IndexSource | None = None
    try:
        source = await kind.build(env)
        yield Subject(request.param, kind, source, env)
    finally:
        try:
            if source is not None:
                await source.aclose()
        finally:
            for cleanup in reversed(env.cleanups):
                await cleanup()
            await env.clients.close()


def expected(env: ContractEnv, query: CaptureQuery) -> list[CdxRecord]:
    """The oracle: a linear scan of both files."""
    return [record for path in env.files for record in linear_scan(path, query)]


def identity(records: list[CdxRecord]) -> Counter[tuple[str, str, str, str]]:
    """What must agree; a digest compares without its ``sha1:`` label (cdxj-indexer and
    py-wacz write it, the sample indexes do not: the same SHA-1)."""
    return Counter((r.urlkey, r.timestamp, r.url, r.digest.removeprefix("sha1:")) for r in records)


# ---------------------------------------------------------------------- tests
def test_every_source_type_has_a_contract_parameter() -> None:
    covered = {kind.source_type for kind in CONTRACT_KINDS.values()}
    missing = sorted(set(SOURCE_TYPES) - covered)
    assert not missing, f"add a CONTRACT_KINDS parameter for {missing} (see module docstring)"
    unknown = sorted(covered - set(SOURCE_TYPES))
    assert not unknown, f"CONTRACT_KINDS names types not in SOURCE_TYPES: {unknown}"
    for kind_id, kind in CONTRACT_KINDS.items():
        assert set(kind.cannot) <= set(CHECKS), kind_id


def test_shorthand_table_agrees_with_each_source_class() -> None:
    # config.py reads SOURCE_SHORTHANDS so that it need not import every type.
    assert list(SOURCE_SHORTHANDS) == list(SOURCE_TYPES)
    for name, shorthand in SOURCE_SHORTHANDS.items():
        factory = SOURCE_TYPES[name]
        assert shorthand.prefixes == factory.shorthand_prefixes, name
        assert shorthand.suffixes == getattr(factory, "shorthand_suffixes", ()), name


async def test_answers_hold_the_same_captures_as_a_linear_scan(
    source_under_test: Subject, contract_queries: list[CaptureQuery]
) -> None:
    subject = source_under_test
    subject.needs("captures")
    total = 0
    for query in contract_queries:
        want = expected(subject.env, query)
        got = await collect(subject.source, query)
        assert identity(got) == identity(want), (query.match_type, query.url)
        total += len(got)
    assert total > 1000  # the queries really did find captures


async def test_widened_lookups_answer_as_plain_ones_or_not_at_all(
    source_under_test: Subject, contract_queries: list[CaptureQuery]
) -> None:
    subject = source_under_test
    widens = subject.kind.source_type not in NOT_WIDENING
    total = 0
    for query in contract_queries:
        if query.match_type != "prefix":
            continue
        got = await collect(subject.source, query.evolve(fuzzy=True))
        want = await collect(subject.source, query) if widens else []
        assert identity(got) == identity(want), query.url
        total += len(got)
    if widens:
        assert total > 100  # the prefix lookups really did find captures
    else:
        assert total == 0


async def test_answers_are_sorted_by_urlkey_then_timestamp(
    source_under_test: Subject, contract_queries: list[CaptureQuery]
) -> None:
    subject = source_under_test
    subject.needs("order")
    longest = 0
    for query in contract_queries:
        keys = [record.sort_key() for record in await collect(subject.source, query)]
        assert keys == sorted(keys), (query.match_type, query.url)
        longest = max(longest, len(keys))
    assert longest >= 100  # at least one answer long enough for order to matter


async def test_answers_stay_inside_the_key_range(
    source_under_test: Subject, contract_queries: list[CaptureQuery]
) -> None:
    subject = source_under_test
    subject.needs("range")
    for query in contract_queries:
        for record in await collect(subject.source, query):
            assert query.key <= record.urlkey, (query.key, record.urlkey)
            assert f"{record.urlkey} {record.timestamp}" < query.end_key, (query.end_key, record)


@pytest.mark.parametrize(
    ("key", "end_key"),
    [("org,iana)/", "org,iana)/"), ("org,iana)/z", "org,iana)/a"), ("", "")],
)
async def test_an_empty_key_range_yields_nothing(
    source_under_test: Subject, key: str, end_key: str
) -> None:
    source_under_test.needs("empty_range")
    query = CaptureQuery(url="-", key=key, end_key=end_key)
    assert await collect(source_under_test.source, query) == []


async def test_concurrent_lookups_answer_as_sequential_ones(
    source_under_test: Subject, contract_queries: list[CaptureQuery]
) -> None:
    subject = source_under_test
    subject.needs("concurrency")
    queries = contract_queries[::7]
    sequential = [await collect(subject.source, query) for query in queries]
    concurrent = await asyncio.gather(*(collect(subject.source, q) for q in queries))
    assert [identity(r) for r in concurrent] == [identity(r) for r in sequential]
    assert sum(map(len, sequential)) > 0


async def test_a_lookup_closed_early_leaves_the_source_usable(source_under_test: Subject) -> None:
    subject = source_under_test
    subject.needs("early_close")
    query = CaptureQuery.for_url("iana.org", match_type="domain")
    for _ in range(3):
        stream = subject.source.lookup(query)
        first = await anext(aiter(stream))
        assert first.urlkey.startswith("org,iana")
        await stream.aclose()  # type: ignore[attr-defined]
    assert identity(await collect(subject.source, query)) == identity(expected(subject.env, query))


def test_describe_is_one_non_empty_line(source_under_test: Subject) -> None:
    source_under_test.needs("describe")
    text = source_under_test.source.describe()
    assert text.strip()
    assert "\n" not in text


async def test_aclose_can_be_called_twice(source_under_test: Subject) -> None:
    source_under_test.needs("aclose")
    source = source_under_test.source
    assert isinstance(source, IndexSource)
    await source.aclose()
    await source.aclose()
    # After close a lookup may fail, but only with a SourceError.
    with contextlib.suppress(SourceError):
        await collect(source, CaptureQuery.for_url("iana.org"))


async def test_a_broken_source_raises_a_source_error(source_under_test: Subject) -> None:
    subject = source_under_test
    subject.needs("failure")
    if subject.kind.broken is None:
        pytest.skip(f"{subject.id} has no broken variant in CONTRACT_KINDS")
    broken = await subject.kind.broken(subject.env)
    try:
        for url in ("iana.org", "http://example.com?example=1"):
            with pytest.raises(subject.kind.failure) as caught:
                await collect(broken, CaptureQuery.for_url(url, match_type="domain"))
            error = caught.value
            assert isinstance(error, SourceError)
            assert error.source == NAME
            assert error.reason
    finally:
        await broken.aclose()


#: Rules over the contract files' captures: a prefix excluded, one URL in it
#: allowed again (exact), a prefix blocked, a dated rule, a user's rule.
CONTRACT_RULES: Final = (
    OracleRule("org,iana)/_css", "exclude"),
    OracleRule("org,iana)/_css/2013.1/print.css", "allow", exact=True),
    OracleRule("org,iana)/about", "block"),
    OracleRule("org,iana)/_img", "allow", before="20140126200800"),
    OracleRule("org,iana)/_js", "allow", user="staff"),
    OracleRule("org,iana)/_js", "exclude"),
    OracleRule("com,example)/", "block"),
)


async def test_access_rules_hold_for_every_source_type(
    source_under_test: Subject, contract_queries: list[CaptureQuery], tmp_path: Path
) -> None:
    """Through an index group with an access policy (the choke point every route
    goes through), no excluded capture is listed, every other one carries the
    oracle's access, and (where the type holds fixed captures) nothing else is
    missing."""
    subject = source_under_test
    acl = tmp_path / "rules.aclj"
    acl.write_text("".join(rule.line() + "\n" for rule in CONTRACT_RULES))
    policy = AccessPolicy.load(AccessConfig(acl_paths=(str(acl),), default_access="exclude"))
    group = IndexGroup([subject.source], timeout_s=30, access=policy)
    rules = list(CONTRACT_RULES)
    listed = 0
    for query in contract_queries:
        answer = await group.lookup(query)
        try:
            got = [record async for record in answer]
        finally:
            await answer.aclose()
        for record in got:
            access = oracle_decide(rules, record.urlkey, record.timestamp, default="exclude")
            assert access != "exclude", (query.url, record.urlkey, record.timestamp)
            assert record.fields["access"] == access, (record.urlkey, record.timestamp)
        listed += len(got)
        if "captures" not in subject.kind.cannot:
            want = [
                record
                for record in expected(subject.env, query)
                if oracle_decide(rules, record.urlkey, record.timestamp, default="exclude")
                != "exclude"
            ]
            assert identity(got) == identity(want), (query.match_type, query.url)
    assert listed > (0 if "captures" in subject.kind.cannot else 100)
    assert policy.decisions["exclude"] > 0 or "captures" in subject.kind.cannot
