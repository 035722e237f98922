"""WACZ files as index sources that load their own records (WACZ 1.1.1, read in place).

A WACZ (:mod:`gateway.loaders.wacz_archive`) is an index source and a
resource loader at once: the source searches its ``indexes/``
(:mod:`gateway.sources.wacz_index`) and brings a
:class:`~gateway.loaders.wacz.WaczLoader` that range-reads records from its
``archive/`` entries, so a collection needs no ``resource:`` entry::

    index: collections/crawl.wacz                     # a local file (relative: to the cwd)
    index: wacz+collections/wacz/                     # every *.wacz in a directory
    index: wacz+https://example.org/crawl.wacz        # HTTP(S), read with Range requests
    index: wacz+s3+http://127.0.0.1:8333/bucket/crawl.wacz   # an object on S3
    index: wacz+storage:backup/crawls/crawl.wacz      # an object on a storage of the store

A WACZ is opened by the first lookup that needs it: its ZIP directory and
``datapackage.json`` are read, every resource's digest is verified (the whole
file read once; hashing in a worker thread; ``verify: false`` skips it), and
its indexes are loaded. A WACZ that fails (not a ZIP, no datapackage, a
digest that differs) is refused: every lookup raises
:class:`~gateway.errors.SourceUnavailable` naming the file and the resource,
and none of its captures is served, until the file changes. Concurrent
lookups share one opening.

A directory is listed again when its mtime changes (checked at most every
``stat_interval_s``), so a new ``.wacz`` is served without a restart; a
local file is reopened (and verified again) when its inode, mtime or size
changes. Records carry ``source`` = the WACZ's file name, which the
aggregator prefixes with the member name (``web:crawl.wacz``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Self

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.cdxops import merge_sorted
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import ArchiveRefused, ArchiveUnavailable, LoadError, SourceUnavailable
from gateway.loaders.base import ResourceLoader
from gateway.loaders.storage_object import STORAGE_PREFIX, StorageObject
from gateway.loaders.wacz import WaczLoader
from gateway.loaders.wacz_archive import WaczArchive, open_wacz
from gateway.loaders.warc_sources import Location
from gateway.missing_dirs import ensure_directory
from gateway.paths import absolute_path
from gateway.sources.base import IndexSource, Page, SourceConfig
from gateway.sources.cdxj_file import STAT_INTERVAL_S, check_stat_interval
from gateway.sources.cdxj_scan import encode_key
from gateway.sources.wacz_index import WaczIndex, load_index, read_pages

__all__ = ["WaczSource", "WaczSourceConfig"]

logger = logging.getLogger(__name__)

_PREFIX: Final = "wacz+"
_REMOTE: Final = ("http://", "https://", "s3://", "s3+http://", "s3+https://", STORAGE_PREFIX)
#: A file name taken as a WACZ in a directory, and as a WACZ path in a shorthand.
WACZ_SUFFIX: Final = ".wacz"


@dataclass(frozen=True, slots=True, kw_only=True)
class WaczSourceConfig:
    """``path``: a local ``.wacz`` file or a directory of them (made absolute at
    load, :mod:`gateway.paths`), an ``http(s)://`` URL, or an S3 object
    ``s3://BUCKET/KEY`` / ``s3+http(s)://HOST:PORT/BUCKET/KEY`` (credentials
    from the environment, as the S3 resolver reads them), or an object of a
    storage of the store, ``storage:NAME/KEY``.
    ``stat_interval_s``: how often a lookup checks whether local files or the
    directory changed. ``verify``: check the datapackage digests when a
    WACZ is opened (default true).
    """

    path: str
    stat_interval_s: float = STAT_INTERVAL_S
    verify: bool = True

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("empty WACZ path; expected a .wacz file, a directory or a URL")
        if not self.path.startswith(_REMOTE):
            object.__setattr__(self, "path", absolute_path(self.path))
        check_stat_interval(self.stat_interval_s)

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """``wacz+PATH_OR_URL``, or a path ending ``.wacz``.

        >>> WaczSourceConfig.from_shorthand("wacz+https://example.org/c.wacz").path
        'https://example.org/c.wacz'
        >>> WaczSourceConfig.from_shorthand("/srv/crawl.wacz").path
        '/srv/crawl.wacz'

        Raises :class:`ValueError` for another URL scheme.
        """
        path = text[len(_PREFIX) :] if text.startswith(_PREFIX) else text
        if path.startswith("file://"):
            path = path[len("file://") :]
        if "://" in path and not path.startswith(_REMOTE):
            raise ValueError(
                f"{text!r}: expected wacz+PATH, wacz+https://HOST/FILE.wacz, "
                "wacz+s3://BUCKET/KEY.wacz or wacz+storage:NAME/KEY.wacz"
            )
        return cls(path=path)


@dataclass(slots=True)
class _Member:
    """One WACZ of the source: where it is, and what opening it gave."""

    label: str
    location: Location
    identity: tuple[int, int, int] | None = None
    opening: asyncio.Task[WaczIndex] | None = None
    index: WaczIndex | None = None
    refused: ArchiveRefused | None = None
    pages: list[Page] | None = None


class WaczSource:
    """One WACZ, or every ``*.wacz`` of a directory (module docstring)."""

    config_type: ClassVar[type[SourceConfig]] = WaczSourceConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = (_PREFIX,)
    shorthand_suffixes: ClassVar[tuple[str, ...]] = (WACZ_SUFFIX,)

    def __init__(
        self, config: WaczSourceConfig, *, name: str, clients: SharedClients, directory: bool
    ) -> None:
        self.name = name
        self.config = config
        self.directory = directory
        self._clients = clients
        self._members: dict[str, _Member] = {}
        self._listing: tuple[int, int, int] | None = None
        self._checked_until = 0.0
        self._loader = WaczLoader(
            name=name,
            archive=self._archive,
            archives=self._archives,
            describe=f"records read from the WACZ files of {config.path}",
            clients=clients,
        )

    @classmethod
    def from_config(cls, config: SourceConfig, *, name: str, clients: SharedClients) -> IndexSource:
        """The source; a missing directory path ending ``/`` is created.

        Raises :class:`ValueError` when a local path does not exist or a
        remote one cannot be parsed.
        """
        if not isinstance(config, WaczSourceConfig):
            raise TypeError(f"expected WaczSourceConfig, got {type(config).__name__}")
        path = config.path
        if path.startswith(_REMOTE):
            source = cls(config, name=name, clients=clients, directory=False)
            source._members[_remote_label(path)] = _Member(
                _remote_label(path), _remote_location(path, clients)
            )
            return source
        if os.path.isdir(path) or path.endswith("/"):
            try:
                ensure_directory(path, "WACZ directory")
            except OSError as exc:
                raise ValueError(f"cannot create WACZ directory {path}: {exc.strerror}") from exc
            return cls(config, name=name, clients=clients, directory=True)
        if not os.path.isfile(path):
            raise ValueError(
                f"WACZ {path} does not exist; expected a .wacz file or a directory "
                "(end the path with '/' to have an empty directory created)"
            )
        return cls(config, name=name, clients=clients, directory=False)

    # ------------------------------------------------------------------ lookup
    async def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Records in ``[query.key, query.end_key)`` by (urlkey, timestamp), every WACZ merged.

        Raises :class:`SourceUnavailable` naming a WACZ that cannot be read or
        was refused (and the resource that failed).
        """
        key, end = encode_key(query.key), encode_key(query.end_key)
        if key >= end:
            return
        indexes = await asyncio.gather(*(self._opened(member) for member in self._current()))
        async for record in merge_sorted([index.lookup(key, end) for index in indexes]):
            yield record

    def _current(self) -> list[_Member]:
        """The members as they are now (re-listed and re-stat'ed at most every interval)."""
        now = time.monotonic()
        if self.config.stat_interval_s and now < self._checked_until and self._members:
            return list(self._members.values())
        if self.config.path.startswith(_REMOTE):
            return list(self._members.values())
        try:
            if self.directory:
                self._relist()
            elif not self._members:
                label = os.path.basename(self.config.path)
                self._members[label] = _Member(label, self.config.path)
            for member in self._members.values():
                self._restat(member)
        except OSError as exc:
            raise SourceUnavailable(
                self.name, f"cannot read {self.config.path}: {exc.strerror or exc}"
            ) from exc
        self._checked_until = now + self.config.stat_interval_s
        return list(self._members.values())

    def _relist(self) -> None:
        st = os.stat(self.config.path)
        listing = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if listing == self._listing and time.time_ns() - st.st_mtime_ns > 2_000_000_000:
            return
        with os.scandir(self.config.path) as entries:
            names = sorted(
                entry.name
                for entry in entries
                if entry.name.endswith(WACZ_SUFFIX)
                and not entry.name.startswith(".")
                and entry.is_file()
            )
        members = {}
        for label in names:
            known = self._members.pop(label, None)
            members[label] = known or _Member(label, os.path.join(self.config.path, label))
        for gone in self._members.values():
            _forget(gone)
        self._members = members
        self._listing = listing

    @staticmethod
    def _restat(member: _Member) -> None:
        assert isinstance(member.location, str)
        st = os.stat(member.location)
        identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        if identity != member.identity:
            _forget(member)
            member.identity = identity

    async def _opened(self, member: _Member) -> WaczIndex:
        """The member's index, opening (and verifying) it first; raises SourceUnavailable."""
        if member.index is not None:
            return member.index
        if member.refused is not None:
            raise SourceUnavailable(self.name, member.refused.message)
        if member.opening is None:
            member.opening = asyncio.ensure_future(self._open(member))
        task = member.opening
        try:
            index = await asyncio.shield(task)
        except ArchiveRefused as exc:
            if member.opening is task:
                member.refused = exc  # until the file changes
            raise SourceUnavailable(self.name, exc.message) from exc
        except LoadError as exc:  # not the file's fault: the next lookup tries again
            raise SourceUnavailable(self.name, exc.message) from exc
        finally:
            ours = member.opening is task  # else the file changed meanwhile: forgotten
            if ours and task.done():
                member.opening = None  # an opening that failed otherwise is tried again
        if ours:
            member.index = index
        return index

    async def _open(self, member: _Member) -> WaczIndex:
        try:
            session = lambda: self._clients.session  # noqa: E731 (called only for URLs)
            archive = await open_wacz(member.location, label=member.label, session=session)
            if self.config.verify:
                for note in await archive.verify():
                    logger.info("WACZ %s: %s", member.label, note)
            return await load_index(archive, source=self.name)
        except ArchiveRefused as exc:
            logger.warning("%s: refused: %s", self.name, exc.message)
            raise

    # ------------------------------------------------------------------ pages
    async def pages(self, limit: int) -> tuple[list[Page], int]:
        """Up to ``limit`` pages of every WACZ's ``pages/pages.jsonl``, by WACZ file
        name then list order, and the total. A WACZ that cannot be opened or
        read is left out (lookups report it)."""
        found: list[Page] = []
        total = 0
        try:
            members = self._current()
        except SourceUnavailable:
            return [], 0
        for member in members:
            try:
                archive = (await self._opened(member)).archive
                if member.pages is None:
                    member.pages = await read_pages(archive)
            except (SourceUnavailable, LoadError) as exc:
                logger.info("%s: no pages from %s: %s", self.name, member.label, exc)
                continue
            total += len(member.pages)
            found += member.pages[: max(0, limit - len(found))]
        return found, total

    # ------------------------------------------------------------ the loader
    async def _archive(self, label: str) -> WaczArchive:
        member = self._members.get(label)
        if member is None:  # not listed yet (a capture found before, or elsewhere)
            try:
                member = next((m for m in self._current() if m.label == label), None)
            except SourceUnavailable as exc:
                raise ArchiveUnavailable(exc.reason, {label: exc.reason}) from exc
        if member is None:
            raise ArchiveRefused(
                f"{self.name}: no WACZ {label!r} (removed since it was searched?)",
                {label: "no such WACZ"},
            )
        try:
            return (await self._opened(member)).archive
        except SourceUnavailable as exc:
            raise ArchiveRefused(exc.message, {label: exc.message}) from exc

    def _archives(self) -> Mapping[str, WaczArchive]:
        return {
            label: member.index.archive
            for label, member in self._members.items()
            if member.index is not None
        }

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """The loader of this member's captures, from the WACZ files themselves."""
        return (self._loader,)

    def describe(self) -> str:
        """``wacz /abs/dir/ (directory, 3 WACZ files opened)`` or ``wacz URL``."""
        kind = "directory" if self.directory else "file"
        opened = sum(member.index is not None for member in self._members.values())
        refused = [m.label for m in self._members.values() if m.refused is not None]
        more = f", refused: {', '.join(refused)}" if refused else ""
        return f"wacz {self.config.path} ({kind}, {opened} opened{more})"

    async def aclose(self) -> None:
        """Close every opened WACZ's in-memory indexes; cancel openings in flight."""
        for member in self._members.values():
            _forget(member)
        self._members = {}


def _forget(member: _Member) -> None:
    """Drop what opening ``member`` gave (it changed, went away or the source closes)."""
    if member.opening is not None:
        member.opening.cancel()
    if member.index is not None:
        member.index.close()
    member.opening = member.index = member.refused = member.pages = None


def _remote_label(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] or path


def _remote_location(path: str, clients: SharedClients) -> Location:
    """A URL as it is; an S3 object as a range location of the S3 resolver; an
    object of a storage of the store as a :class:`StorageObject`."""
    if path.startswith(("http://", "https://")):
        return path
    if path.startswith(STORAGE_PREFIX):
        return StorageObject(path, clients)
    from gateway.loaders.s3_resolver import S3Resolver, S3ResolverConfig

    head, _, key = path.rpartition("/")
    config = S3ResolverConfig.from_shorthand(head + "/")
    return S3Resolver(config, clients=clients).object(key)
