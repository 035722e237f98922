"""Scaffolding of the loader contract suite (tests/loaders/test_contract.py).

``LoaderEnv``
    what an entry's builder gets: the sample archive, a started
    :class:`~gateway.clients.SharedClients`, the ``aiohttp_server`` factory,
    session fixtures on demand and cleanups.
``Built``
    what a builder returns: the loader, its own captures, foreign captures
    and the ``find_original`` its revisits need.
``Kind``
    one entry of ``LOADER_KINDS``: loader class, builders, expected failure,
    checks it cannot pass (names from :data:`CHECKS`), whether it needs pywb.
``Subject``
    what the checks get: the entry, the built loader and helpers to load.

Captures are made as the aggregator hands them to loaders: :func:`tagged`
sets ``source``/``source-coll``; :func:`remote_capture` makes one as a remote
or live source does; :func:`other_member` and :func:`no_file` make captures
a loader must refuse. :func:`parse_one` reads a served record back with
warcio; :func:`verify_digest` checks a ``WARC-Payload-Digest`` label;
:func:`assert_released` waits (at most :data:`SETTLE_S`) for descriptors and
tasks to return to a baseline; :func:`loader_classes_in_gateway` lists every
class of the package implementing the ResourceLoader protocol.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib
import inspect
import io
import pkgutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
from aiohttp.test_utils import TestServer
from warcio.archiveiterator import ArchiveIterator

import gateway
from gateway.cdx.cdxj import CdxRecord, canonical_urlkey
from gateway.clients import SharedClients
from gateway.errors import LoadError
from gateway.loaders.base import FindOriginal, LoadContext, LoadedRecord, ResourceLoader
from tests.loaders.conftest import make_finder, open_fds

#: The configured name of the loader's source (``source-coll`` of its captures).
NAME: Final = "contract"
#: The sample WARC files the WARC-based entries load, and their indexes.
CONTRACT_WARCS: Final = ("iana.warc.gz", "example.warc.gz")
CONTRACT_INDEXES: Final = ("iana.cdxj", "example.cdxj")
#: The checks of this suite; ``Kind.cannot`` keys must be among them.
CHECKS: Final = (
    "accepts",
    "record",
    "content_length",
    "warc_date",
    "payload_digest",
    "index_digest",
    "aclose",
    "early_close",
    "failure",
)
#: How long released descriptors and finished tasks may take to disappear.
SETTLE_S: Final = 5.0
SETTLE_STEP_S: Final = 0.01

AiohttpServer = Callable[..., Awaitable[TestServer]]
Cleanup = Callable[[], Awaitable[None]]


@dataclass(slots=True)
class LoaderEnv:
    """What a builder gets: the sample archive, a started client, real servers."""

    sample_dir: Path
    tmp_path: Path
    clients: SharedClients
    aiohttp_server: AiohttpServer
    request: pytest.FixtureRequest
    cleanups: list[Cleanup] = field(default_factory=list)

    @property
    def warcs(self) -> Path:
        return self.sample_dir / "warcs"

    def fixture(self, name: str) -> Any:
        """A synchronous fixture by name (``redis_server``, ``pywb_wayback``)."""
        return self.request.getfixturevalue(name)

    def add_cleanup(self, cleanup: Cleanup) -> None:
        """Run ``await cleanup()`` after the test (last added, first run)."""
        self.cleanups.append(cleanup)

    def index(self) -> list[CdxRecord]:
        """Every capture of CONTRACT_INDEXES, in file order."""
        lines = [
            line
            for name in CONTRACT_INDEXES
            for line in (self.sample_dir / "cdxj" / name).read_text("utf-8").splitlines()
        ]
        return [CdxRecord.parse(line) for line in lines if line.strip()]


@dataclass(slots=True)
class Built:
    """A loader, the captures it must load and the captures it must leave alone."""

    loader: ResourceLoader
    own: list[CdxRecord]
    foreign: list[CdxRecord] = field(default_factory=list)
    find_original: FindOriginal = field(default_factory=lambda: make_finder([]))


Builder = Callable[[LoaderEnv], Awaitable[Built]]


@dataclass(frozen=True, slots=True)
class Kind:
    """One contract entry: a loader class, how to build it and how it fails."""

    loader_type: type[Any]
    build: Builder
    broken: Builder
    failure: type[LoadError] = LoadError
    cannot: Mapping[str, str] = field(default_factory=dict)
    peer: bool = False


@dataclass(slots=True)
class Subject:
    """The loader under test, its entry, captures and environment."""

    id: str
    kind: Kind
    built: Built
    env: LoaderEnv

    @property
    def loader(self) -> ResourceLoader:
        return self.built.loader

    def needs(self, check: str) -> None:
        """Skip the test, with the entry's reason, when it cannot pass ``check``."""
        assert check in CHECKS, check
        reason = self.kind.cannot.get(check)
        if reason is not None:
            pytest.skip(f"{self.id} cannot be checked for {check}: {reason}")

    def context(self, capture: CdxRecord) -> LoadContext:
        return LoadContext(request_url=capture.url, find_original=self.built.find_original)

    async def load(self, capture: CdxRecord) -> LoadedRecord:
        return await self.loader.load(capture.copy(), self.context(capture))

    async def load_all(self, capture: CdxRecord) -> tuple[LoadedRecord, bytes]:
        """Load ``capture``, read its body, close it; the record and every byte served."""
        loaded = await self.load(capture)
        try:
            body = b"".join([chunk async for chunk in loaded.body])
        finally:
            await loaded.aclose()
        return loaded, loaded.warc_headers + loaded.http_headers + body


# ------------------------------------------------------------------ captures
def tagged(record: CdxRecord, coll: str = NAME) -> CdxRecord:
    """``record`` with ``source``/``source-coll`` as the aggregator sets them."""
    record.fields["source"] = coll
    record.fields["source-coll"] = coll
    return record


def pick(index: list[CdxRecord], keys: tuple[tuple[str, str], ...]) -> list[CdxRecord]:
    """The first capture of ``index`` for each (urlkey, timestamp), tagged as NAME's."""
    picked = []
    for urlkey, timestamp in keys:
        record = next(r for r in index if (r.urlkey, r.timestamp) == (urlkey, timestamp))
        picked.append(tagged(record.copy()))
    return picked


def remote_capture(url: str, timestamp: str, load_url: str, **fields: str) -> CdxRecord:
    """A capture as a remote (``load_url``) or live (``is_live``) source makes it."""
    return tagged(
        CdxRecord(canonical_urlkey(url), timestamp, {"url": url, "load_url": load_url, **fields})
    )


def other_member(records: list[CdxRecord]) -> list[CdxRecord]:
    """Copies of ``records`` found by another member, and untagged ones."""
    return [tagged(r.copy(), "other") for r in records] + [
        CdxRecord(r.urlkey, r.timestamp, {k: v for k, v in r.fields.items() if "source" not in k})
        for r in records
    ]


def no_file(url: str = "http://example.com/") -> list[CdxRecord]:
    """Captures without a WARC filename: remote, live, a CDX revisit with ``filename: -``."""
    revisit = tagged(CdxRecord(canonical_urlkey(url), "20140101000000", {"url": url}))
    revisit.fields.update({"mime": "warc/revisit", "filename": "-", "offset": "0"})
    return [
        remote_capture(url, "20140101000000", f"http://archive.invalid/20140101000000id_/{url}"),
        remote_capture(url, "20140101000000", url, is_live="true"),
        revisit,
    ]


def sha1_base32(data: bytes) -> str:
    """The SHA-1 of ``data`` in base 32, as CDX ``digest`` fields hold it."""
    return base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


# ------------------------------------------------------------------- records
@dataclass(slots=True)
class Served:
    """One record as warcio reads it back (payload raw, as stored)."""

    rec_type: str
    headers: dict[str, str]
    payload: bytes
    #: HTTP header block (as warcio re-serializes it) plus payload, in bytes.
    block_length: int


def parse_one(data: bytes) -> Served:
    """The one WARC record of ``data`` (a served record, without its CRLF CRLF).

    Fails the test when warcio finds another number of records.
    """
    records = []
    stream = io.BytesIO(data + b"\r\n\r\n")
    for record in ArchiveIterator(stream, ensure_http_headers=False):
        http = record.http_headers
        http_length = len(http.to_bytes()) if http is not None else 0
        payload = record.raw_stream.read()
        headers = dict(record.rec_headers.headers)
        records.append(Served(record.rec_type, headers, payload, http_length + len(payload)))
    assert len(records) == 1, f"{len(records)} records in what was served as one"
    return records[0]


def verify_digest(label: str, data: bytes) -> bool:
    """True when ``label`` (``sha1:BASE32``, ``sha256:HEX``...) is the digest of ``data``."""
    algorithm, _, value = label.partition(":")
    digest = hashlib.new(algorithm.lower().replace("-", ""), data).digest()
    return value.upper() in (base64.b32encode(digest).decode(), digest.hex().upper())


async def load_and_drain(loader: ResourceLoader, capture: CdxRecord, ctx: LoadContext) -> None:
    """Load ``capture`` and read its body (a failure may come while it is read)."""
    loaded = await loader.load(capture.copy(), ctx)
    try:
        async for _ in loaded.body:
            pass
    finally:
        await loaded.aclose()


async def close_loader(loader: object) -> None:
    """``await loader.aclose()`` for loaders that own resources (the live loader)."""
    aclose = getattr(loader, "aclose", None)
    if aclose is not None:
        await aclose()


# ------------------------------------------------------------------ resources
def baseline() -> tuple[int, set[asyncio.Task[Any]]]:
    """Open descriptors (``/proc/self/fd``) and running tasks, to compare with later."""
    return open_fds(), asyncio.all_tasks()


async def assert_released(before: tuple[int, set[asyncio.Task[Any]]], what: str) -> None:
    """Fail unless descriptors and tasks are back to ``before`` within SETTLE_S.

    The in-process servers close their side of a connection a few loop
    iterations after the client does; a leak stays.
    """
    fds, tasks = before
    for _ in range(round(SETTLE_S / SETTLE_STEP_S)):
        if open_fds() <= fds and not asyncio.all_tasks() - tasks:
            return
        await asyncio.sleep(SETTLE_STEP_S)
    leaked_fds = open_fds() - fds
    assert leaked_fds <= 0, f"{what}: {leaked_fds} file descriptors still open"
    leaked = [task.get_coro() for task in asyncio.all_tasks() - tasks]
    assert not leaked, f"{what}: tasks still running: {leaked}"


# ---------------------------------------------------------------------- guard
def loader_classes_in_gateway() -> set[type[Any]]:
    """Every class of the gateway package implementing ResourceLoader (not protocols)."""
    found: set[type[Any]] = set()
    for info in pkgutil.walk_packages(gateway.__path__, "gateway."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or getattr(cls, "_is_protocol", False):
                continue
            if all(callable(getattr(cls, name, None)) for name in ("accepts", "load", "describe")):
                found.add(cls)
    return found
