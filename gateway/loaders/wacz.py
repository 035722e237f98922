"""The WACZ loader: a capture's record range-read from its WACZ's ``archive/`` entry.

A WACZ source (:mod:`gateway.sources.wacz`) brings this loader
(``resource_loaders()``), so a collection needs no ``resource:`` entry for
it. A capture found in a WACZ carries ``source`` = ``member:label`` (the
member's name and the WACZ's label, its file name in a directory) and a CDX
``filename`` relative to ``archive/`` (WACZ 1.1.1 §archive, as py-wacz writes
it). The loader is the gateway's WARC loader
(:class:`~gateway.loaders.warc.WarcLoader`: record reading, revisits,
``compress=gzip``) with one resolver that maps ``filename`` to the entry
``archive/<filename>`` of the capture's WACZ, then of the member's other
WACZ files (a revisit's original may be in another one). The entry must be
stored (uncompressed in the ZIP, as WACZ requires): the record is then the
bytes at (entry data offset + CDX ``offset``) of the WACZ itself, read from
the same place as the WACZ (path, URL with ``Range``, storage object).
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Self

from gateway.cdx.cdxj import CdxRecord
from gateway.clients import SharedClients
from gateway.errors import ArchiveFileNotFound, ArchiveRefused, RecordFormatError
from gateway.loaders.base import LoadContext, LoadedRecord
from gateway.loaders.resolvers import check_filename
from gateway.loaders.wacz_archive import WaczArchive, ZipEntry
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig
from gateway.loaders.warc_sources import Location, open_source
from gateway.storage.base import RangeReader

__all__ = ["ArchiveGetter", "WaczLoader", "WaczResolverConfig"]

#: ``label -> opened and verified archive`` (raises a LoadError when it is refused).
ArchiveGetter = Callable[[str], Awaitable[WaczArchive]]
#: ``() -> every opened and verified archive of the member, by label``.
ArchivesGetter = Callable[[], Mapping[str, WaczArchive]]

#: The label of the WACZ whose capture is being loaded (looked in first).
_PREFERRED: contextvars.ContextVar[WaczArchive | None] = contextvars.ContextVar(
    "wacz_preferred", default=None
)


@dataclass(frozen=True, slots=True, kw_only=True)
class WaczResolverConfig:
    """The member's WACZ files as a WARC location (no settings of its own)."""

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        raise ValueError(f"{text!r}: a WACZ resolver is built by its source, not configured")


class _EntryLocation:
    """``archive/<name>`` of one WACZ as a :class:`~gateway.loaders.warc_sources.RangeLocation`."""

    __slots__ = ("_archive", "_entry")

    def __init__(self, archive: WaczArchive, entry: ZipEntry) -> None:
        self._archive = archive
        self._entry = entry

    def __str__(self) -> str:
        return f"{self._archive.label}!{self._entry.name}"

    async def open_range(self, offset: int, length: int | None) -> RangeReader:
        entry = self._entry
        end = entry.size if length is None else offset + length
        if offset < 0 or end > entry.size:
            where = str(self)
            raise RecordFormatError(
                f"{where}: bytes {offset}-{end} lie past the end of the entry "
                f"({entry.size} bytes); check the CDX offset and length",
                {where: "range past the entry"},
            )
        start = await self._archive.data_offset(entry)
        archive = self._archive
        return await open_source(archive.location, start + offset, end - offset, archive.session)


class _WaczResolver:
    """``filename`` -> ``archive/filename`` in the preferred WACZ, then in the others."""

    def __init__(self, archives: ArchivesGetter, describe: str) -> None:
        self._archives = archives
        self._describe = describe

    async def locate(self, filename: str) -> list[Location]:
        check_filename(filename)
        # py-wacz writes the name inside archive/; some writers include the folder.
        name = filename if filename.startswith("archive/") else f"archive/{filename}"
        preferred = _PREFERRED.get()
        candidates = [] if preferred is None else [preferred]
        candidates += [a for a in self._archives().values() if a is not preferred]
        locations: list[Location] = []
        for archive in candidates:
            entry = archive.entries.get(name)
            if entry is None:
                continue
            if not entry.stored:
                raise ArchiveRefused(
                    f"WACZ {archive.label}: {name} is compressed in the ZIP; WACZ 1.1.1 "
                    "stores WARCs uncompressed (ZIP STORE) so records can be range-read",
                    {archive.label: f"{name}: not stored"},
                )
            locations.append(_EntryLocation(archive, entry))
        return locations

    def describe(self) -> str:
        return self._describe


class WaczLoader:
    """Loads the captures of one WACZ member (module docstring).

    ``accepts`` only captures tagged with this member's name (``source-coll``)
    that name a file and offset. Raises what the WARC loader raises, and
    :class:`~gateway.errors.ArchiveRefused` when the capture's WACZ failed its
    integrity check.
    """

    def __init__(
        self,
        *,
        name: str,
        archive: ArchiveGetter,
        archives: ArchivesGetter,
        describe: str,
        clients: SharedClients,
    ) -> None:
        self.name = name
        self._archive = archive
        config = WarcLoaderConfig(resolvers=(WaczResolverConfig(),))
        resolver = _WaczResolver(archives, describe)
        self._warc = WarcLoader(config, clients=clients, resolvers=[resolver])

    def accepts(self, capture: CdxRecord) -> bool:
        return capture.fields.get("source-coll") == self.name and self._warc.accepts(capture)

    async def load(self, capture: CdxRecord, ctx: LoadContext) -> LoadedRecord:
        """Load the record from the WACZ named by the capture's ``source``."""
        source = capture.source
        prefix = f"{self.name}:"
        if not source.startswith(prefix):
            raise ArchiveFileNotFound(
                f"capture {capture.url} {capture.timestamp} names no WACZ (source {source!r})",
                {self.name: "no WACZ named"},
            )
        archive = await self._archive(source[len(prefix) :])
        token = _PREFERRED.set(archive)
        try:
            return await self._warc.load(capture, ctx)
        finally:
            _PREFERRED.reset(token)

    def describe(self) -> str:
        return self._warc.describe()
