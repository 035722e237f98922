"""ZipNum cluster indexes: a sorted summary of gzip blocks of CDX lines.

pywb's ``ZipNumIndexSource`` (pywb/warcserver/index/zipnum.py) and the IA's
cluster format. Three files:

- the summary (``.idx`` or ``.summary``): one sorted line per block,
  ``urlkey timestamp<TAB>part<TAB>offset<TAB>length<TAB>lineno``, the key of the
  block's first CDX line and where the block lies;
- the shards (``part`` names), each a run of gzip members, one member per
  block of sorted CDX or CDXJ lines;
- the location file (``.loc``, beside the summary unless ``loc`` says
  otherwise): ``part<TAB>path[<TAB>path...]`` per line; relative paths are
  relative to the location file, and the paths of a part are tried in order
  (pywb's ``LocMapResolver``).

A lookup binary-searches the summary (as a plain index file, 8 KiB blocks,
:func:`~gateway.sources.cdxj_scan.search_offset`) for the last block that
starts before ``query.key`` and every block that starts before
``query.end_key``; adjacent blocks of one shard are read together, up to
``max_blocks`` at a time (pywb's default 10), with ``pread``, inflated and cut
to the key range. The summary, the location file and the shards are reopened
when they change, checked with one ``os.stat`` each at most every
``stat_interval_s`` (as CDXJ files, :mod:`gateway.sources.cdxj_file`).

A block is inflated as far as a lookup needs its lines
(:class:`~gateway.sources.zipnum_blocks.Block`), and the last blocks read
are kept, as far as they were inflated, in one LRU of ``cache_bytes``
(:class:`~gateway.sources.zipnum_remote.BlockCache`), keyed by the local
shard file's identity (device, inode, mtime, size) or the remote location,
and the block's offset: a lookup of a block read before costs a dictionary
lookup and a bisection instead of a read and the inflation of its few
thousand lines (a 3,000-line block is about 1 MB of text). Short answers
are remembered per version of the summary
(:class:`~gateway.sources.range_memo.RangeMemo`).

A location may also be an ``http(s)://`` URL or an object on S3
(``s3://BUCKET/KEY``, ``s3+http(s)://HOST:PORT/BUCKET/KEY``, or
``storage:NAME/KEY`` on a storage of the store): those blocks
are read with one range request per run of adjacent blocks
(:mod:`gateway.sources.zipnum_remote`).
A cluster whose location file names only local files is read without an
await per block (:class:`~gateway.cdx.cdxops.LocalScan`); one naming a
remote location is read by an async generator. A shard that no location
serves is a :class:`SourceUnavailable`, never an empty answer.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Self, cast

from gateway.cdx.cdxj import CdxFormatError, CdxRecord
from gateway.cdx.cdxops import LocalScan
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import SourceBadAnswer, SourceUnavailable
from gateway.loaders.base import ResourceLoader
from gateway.paths import absolute_path
from gateway.sources.base import IndexSource, SourceConfig
from gateway.sources.cdxj_file import STAT_INTERVAL_S, check_stat_interval
from gateway.sources.cdxj_scan import (
    CDX_HEADERS,
    Handle,
    IndexFile,
    encode_key,
    unavailable,
)
from gateway.sources.range_memo import RANGE_RECORDS, Image, RangeMemo
from gateway.sources.zipnum_blocks import Block, summary_lines
from gateway.sources.zipnum_remote import BlockCache, ShardStats, is_remote, read_range

__all__ = [
    "SUMMARY_SUFFIXES",
    "ZipNumSource",
    "ZipNumSourceConfig",
]

#: File names taken as ZipNum summaries when given as a plain path (pywb ``IDX_EXT``).
SUMMARY_SUFFIXES: Final = (".idx", ".summary")
_PREFIX: Final = "zipnum+"


@dataclass(frozen=True, slots=True, kw_only=True)
class ZipNumSourceConfig:
    """A ZipNum summary ``path``; ``loc`` the location file (default: the
    summary's name with ``.loc``); ``max_blocks`` adjacent blocks read at once;
    ``cache_bytes`` the blocks kept (LRU, bytes of text held, default 64 MiB);
    ``stat_interval_s`` how often (seconds) a lookup checks with ``os.stat``
    whether the summary, the location file or a shard changed (0: every lookup).
    Both paths are made absolute when the config is loaded (:mod:`gateway.paths`)."""

    path: str
    loc: str | None = None
    max_blocks: int = 10
    cache_bytes: int = 64 * 1024 * 1024
    stat_interval_s: float = STAT_INTERVAL_S

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("empty ZipNum summary path; expected zipnum+/path/to/index.idx")
        if self.max_blocks < 1:
            raise ValueError(f"max_blocks {self.max_blocks}: expected at least 1")
        if self.cache_bytes < 0:
            raise ValueError(f"cache_bytes {self.cache_bytes}: expected 0 or more")
        check_stat_interval(self.stat_interval_s)
        object.__setattr__(self, "path", absolute_path(self.path))
        if self.loc:
            object.__setattr__(self, "loc", absolute_path(self.loc))

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """``zipnum+PATH``, ``zipnum+file:///PATH`` or a path ending ``.idx``/``.summary``.

        >>> config = ZipNumSourceConfig.from_shorthand("zipnum+file:///srv/cluster/index.idx")
        >>> config.path, config.loc, config.max_blocks, config.stat_interval_s
        ('/srv/cluster/index.idx', None, 10, 1.0)
        >>> ZipNumSourceConfig.from_shorthand("/srv/cluster/all.summary").path
        '/srv/cluster/all.summary'

        Raises :class:`ValueError` for a URL other than ``file://``.
        """
        path = text[len(_PREFIX) :] if text.startswith(_PREFIX) else text
        if path.startswith("file://"):
            path = path[len("file://") :]
        if "://" in path:
            raise ValueError(
                f"{text!r}: a ZipNum summary must be a local file; expected zipnum+/path/index.idx"
            )
        return cls(path=path)


@dataclass(frozen=True, slots=True)
class _Block:
    """One summary line: the block's shard, byte offset and compressed length."""

    part: str
    offset: int
    length: int


class ZipNumSource:
    """A ZipNum cluster (module docstring); records in ``[key, end_key)``, sorted.

    Raises :class:`SourceUnavailable` when the summary, the location file or
    every location of a shard cannot be read, :class:`SourceBadAnswer` for a
    malformed summary line, a part missing from (or without a path in) the
    location file, a corrupt block, a block inflating past 64 MiB or an
    unparseable CDX line (each naming the file or part).
    """

    config_type: ClassVar[type[SourceConfig]] = ZipNumSourceConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = (_PREFIX,)
    #: Plain paths with these endings are ZipNum summaries (pywb ``IDX_EXT``).
    shorthand_suffixes: ClassVar[tuple[str, ...]] = SUMMARY_SUFFIXES

    def __init__(
        self, config: ZipNumSourceConfig, *, name: str, clients: SharedClients | None = None
    ) -> None:
        self.name = name
        self.path = os.path.abspath(config.path)
        self.loc_path = os.path.abspath(config.loc or os.path.splitext(config.path)[0] + ".loc")
        self.max_blocks = config.max_blocks
        self.clients = clients
        #: Reads by shard and block cache hits (``/metrics``).
        self.stats = ShardStats()
        self._cache = BlockCache(config.cache_bytes)
        #: Short answers by version (:class:`RangeMemo`; its counters go to ``/metrics``).
        self.memo = RangeMemo()
        self.stat_interval_s = config.stat_interval_s
        self._summary = IndexFile(self.path, source=name, stat_interval_s=self.stat_interval_s)
        self._shards: dict[str, IndexFile] = {}
        self._locations: dict[str, list[str]] = {}
        self._loc_identity: tuple[int, int, int, int] | None = None
        self._loc_checked_until = 0.0
        #: Whether the location file names a remote shard (None: not read yet).
        self._remote: bool | None = None

    @classmethod
    def from_config(cls, config: SourceConfig, *, name: str, clients: SharedClients) -> IndexSource:
        """The source; raises :class:`ValueError` when the summary or location file is missing."""
        if not isinstance(config, ZipNumSourceConfig):
            raise TypeError(f"expected ZipNumSourceConfig, got {type(config).__name__}")
        source = cls(config, name=name, clients=clients)
        for what, path in (("summary", source.path), ("location file", source.loc_path)):
            if not os.path.isfile(path):
                raise ValueError(f"ZipNum {what} {path} does not exist or is not a file")
        return source

    def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Records in ``[query.key, query.end_key)`` in (urlkey, timestamp) order:
        a :class:`~gateway.cdx.cdxops.LocalScan` (no await per record) while the
        location file names local shards only, else an async generator (the
        first lookup reads the location file to know which)."""
        key, end = encode_key(query.key), encode_key(query.end_key)
        if self._remote is None:
            with contextlib.suppress(SourceUnavailable):  # the lookup tries again, and reports it
                self._load_locations()
        if self._remote is False:
            return LocalScan(self._scan(key, end))
        return self._scan_remote(key, end)

    def _scan(self, key: bytes, end: bytes) -> Generator[CdxRecord | None, None, None]:
        """Records of local shards; an answer of at most ``RANGE_RECORDS`` records
        is remembered (:class:`RangeMemo`) by the summary's version with the
        location file's and the shards' versions, and given again while all
        three are current."""
        if key >= end:
            return
        try:
            handle = self._summary.acquire()
        except OSError as exc:
            raise unavailable(self.name, self.path, exc) from exc
        try:
            memo = self.memo
            kept = memo.get(handle.identity, key, end)
            if kept is not None and self._still_current(kept[1]):
                memo.hits += 1
                for image in kept[0]:
                    yield CdxRecord.from_snapshot(image)
                return
            memo.misses += 1
            images: list[Image] | None = []
            shards: list[tuple[IndexFile, object]] = []
            for run in self._runs(handle, key, end):
                if self._remote:
                    raise SourceUnavailable(
                        self.name,
                        f"ZipNum location file {self.loc_path} changed to remote shards "
                        "during this lookup; the next lookup reads them",
                    )
                shard, identity, lines = self._lines(run)
                if images is not None and (shard, identity) not in shards:
                    shards.append((shard, identity))
                if (yield from self._records(run, lines, key, end, images)):
                    break
                if images is not None and len(images) > RANGE_RECORDS:
                    images = None
            if images is not None and len(images) <= RANGE_RECORDS:
                versions = (self._loc_identity, tuple(shards))
                memo.remember(handle.identity, key, end, images, versions)
        finally:
            handle.release()

    def _still_current(self, versions: tuple[object, ...]) -> bool:
        """Whether the location file and the shards a remembered answer was read
        from are the versions it was read from (each checked at most every
        ``stat_interval_s``)."""
        loc_identity, shards = versions
        self._load_locations()
        if self._remote or self._loc_identity != loc_identity:
            return False
        assert isinstance(shards, tuple)
        for shard, identity in shards:
            try:
                if shard.current_identity() != identity:
                    return False
            except OSError:
                return False  # read again: that lookup reports what is wrong
        return True

    async def _scan_remote(self, key: bytes, end: bytes) -> AsyncGenerator[CdxRecord, None]:
        if key >= end:
            return
        with self._acquired() as handle:
            for run in self._runs(handle, key, end):
                records = self._records(run, await self._fetch_lines(run), key, end)
                while True:
                    try:
                        record = next(records)
                    except StopIteration as stop:
                        if stop.value:  # a line at or past the end was met
                            return
                        break
                    if record is not None:
                        yield record

    @contextlib.contextmanager
    def _acquired(self) -> Iterator[Handle]:
        try:
            handle = self._summary.acquire()
        except OSError as exc:
            raise unavailable(self.name, self.path, exc) from exc
        try:
            yield handle
        finally:
            handle.release()

    def _runs(self, handle: Handle, key: bytes, end: bytes) -> Generator[list[_Block], None, None]:
        """Runs of adjacent blocks of one shard (at most ``max_blocks``) that may
        hold lines in ``[key, end)``; the location file is checked (after the
        summary, which a build replaces last) before the first run."""
        run: list[_Block] = []
        located = False
        for block in self._blocks(handle, key, end):
            if not located:
                self._load_locations()
                located = True
            if run and not (
                len(run) < self.max_blocks
                and block.part == run[-1].part
                and block.offset == run[-1].offset + run[-1].length
            ):
                yield run
                run = []
            run.append(block)
        if run:
            yield run

    def _records(
        self,
        run: list[_Block],
        blocks: Sequence[Block],
        key: bytes,
        end: bytes,
        images: list[Image] | None = None,
    ) -> Generator[CdxRecord | None, None, bool]:
        """Records of a run's blocks in ``[key, end)``, then a checkpoint; returns
        True once a line at or past ``end`` was met. Each block is inflated as
        far as its lines are needed (:class:`~gateway.sources.zipnum_blocks.Block`);
        its lines are sorted (the format): the first at or after ``key`` is
        bisected for. The images of the first ``RANGE_RECORDS`` + 1 records go
        to ``images``."""
        for block in blocks:
            index = block.index_of(key)
            lines = block.lines
            while True:
                while index < len(lines):
                    line = lines[index]
                    index += 1
                    if line < key or line.startswith(CDX_HEADERS):
                        continue  # (line < key: a block that is not sorted after all)
                    if line >= end:
                        return True
                    try:
                        record = CdxRecord.parse(line)
                    except CdxFormatError as exc:
                        where = f"ZipNum shard {run[0].part}: {exc}"
                        raise SourceBadAnswer(self.name, where) from exc
                    if images is not None and len(images) <= RANGE_RECORDS:
                        images.append(record.snapshot())
                    yield record
                if block.done:
                    break
                block.more()
        yield None  # a checkpoint after every read
        return False

    # -------------------------------------------------------------- the summary
    def _blocks(self, handle: Handle, key: bytes, end: bytes) -> Generator[_Block, None, None]:
        """The blocks that may hold lines in ``[key, end)``, in summary order."""
        try:
            for line in summary_lines(handle, key, end):
                yield self._block(line)
        except OSError as exc:
            raise unavailable(self.name, self.path, exc) from exc
        except ValueError as exc:
            raise SourceBadAnswer(self.name, f"ZipNum summary {self.path}: {exc}") from exc

    def _block(self, line: bytes) -> _Block:
        fields = line.rstrip(b"\r\n").split(b"\t")
        try:
            return _Block(fields[1].decode("utf-8"), int(fields[2]), int(fields[3]))
        except (IndexError, ValueError, UnicodeDecodeError):
            shown = line[:200].decode("utf-8", "replace")
            raise SourceBadAnswer(
                self.name,
                f"ZipNum summary {self.path}: {shown!r} is not "
                "'urlkey timestamp<TAB>part<TAB>offset<TAB>length[<TAB>lineno]'",
            ) from None

    # -------------------------------------------------------------- the shards
    def _load_locations(self) -> None:
        """Re-read the location file when it changed (pywb reads it on every lookup),
        checked at most every ``stat_interval_s``."""
        if self.stat_interval_s and time.monotonic() < self._loc_checked_until:
            return
        try:
            st = os.stat(self.loc_path)
            identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            if identity == self._loc_identity:
                self._loc_checked_until = time.monotonic() + self.stat_interval_s
                return
            with open(self.loc_path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            raise SourceUnavailable(
                self.name, f"cannot read ZipNum location file {self.loc_path}: {reason}"
            ) from exc
        base = os.path.dirname(self.loc_path)
        locations: dict[str, list[str]] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            part, *paths = line.rstrip().split("\t")
            locations[part] = [p if is_remote(p) else os.path.join(base, p) for p in paths if p]
        self._locations = locations
        self._loc_identity = identity
        self._loc_checked_until = time.monotonic() + self.stat_interval_s
        self._remote = any(is_remote(p) for paths in locations.values() for p in paths)
        if self._remote:
            self._cache.clear()  # a new generation may reuse a location's name

    def _paths(self, part: str) -> list[str]:
        paths = self._locations.get(part)
        if not paths:
            problem = "has no path in" if paths is not None else "is not in"
            raise SourceBadAnswer(
                self.name,
                f"ZipNum part {part!r} {problem} location file {self.loc_path}; "
                "expected a line 'part<TAB>path[<TAB>path...]'",
            )
        return paths

    def _lines(self, run: Sequence[_Block]) -> tuple[IndexFile, object, list[Block]]:
        """The blocks of a run of adjacent blocks of a local shard, from the
        block cache or one ``pread`` of the whole run, with the shard file
        they are from (its first readable location) and its version (identity)."""
        part = run[0].part
        cache = self._cache
        failures = []
        for path in self._paths(part):
            if is_remote(path):
                failures.append(f"{path}: a remote location, read by the next lookup")
                continue
            shard = self._shard(path)
            try:
                handle = shard.acquire()
            except OSError as exc:
                failures.append(f"{path}: {exc.strerror or exc}")
                continue
            identity = handle.identity
            offset = run[0].offset
            length = run[-1].offset + run[-1].length - offset  # the blocks are adjacent
            try:
                kept = [cache.get(identity, block.offset) for block in run]
                if None not in kept:
                    return shard, identity, cast("list[Block]", kept)
                data = os.pread(handle.fd, length, offset)
            except OSError as exc:
                failures.append(f"{path}: {exc.strerror or exc}")
                continue
            finally:
                handle.release()
            if len(data) < length:
                failures.append(f"{path}: ends before byte {offset + length}")
                continue
            self.stats.count_request(part, length)
            blocks: list[Block] = []
            for block in run:
                at = block.offset - offset
                member = data[at : at + block.length]
                read = Block(member, source=self.name, part=part, offset=block.offset)
                blocks.append(read)
                cache.put(identity, block.offset, read)
            return shard, identity, blocks
        raise SourceUnavailable(
            self.name, f"ZipNum part {part!r}: no location could be read ({'; '.join(failures)})"
        )

    async def _fetch_lines(self, run: Sequence[_Block]) -> list[Block]:
        """The blocks of a run, from the block cache or one range read of the
        blocks missing from it (local shards: :meth:`_lines`)."""
        paths = self._paths(run[0].part)
        if not any(is_remote(p) for p in paths):
            return self._lines(run)[2]
        blocks: list[Block | None] = [self._cache.get(paths[0], b.offset) for b in run]
        missing = [i for i, kept in enumerate(blocks) if kept is None]
        self.stats.cache_hits += len(run) - len(missing)
        self.stats.cache_misses += len(missing)
        if missing:
            first, last = run[missing[0]], run[missing[-1]]
            length = last.offset + last.length - first.offset
            data = await self._read_remote(first.part, paths, first.offset, length)
            for i in missing:
                block = run[i]
                member = data[block.offset - first.offset :][: block.length]
                read = blocks[i] = Block(
                    member, source=self.name, part=block.part, offset=block.offset
                )
                self._cache.put(paths[0], block.offset, read)
        return cast("list[Block]", blocks)

    async def _read_remote(self, part: str, paths: list[str], offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` of ``part`` from its first readable location."""
        failures = []
        for path in paths:
            if not is_remote(path):
                try:
                    return self._read_local(part, path, offset, length)
                except OSError as exc:
                    failures.append(f"{path}: {exc.strerror or exc}")
                    continue
            if self.clients is None:
                failures.append(f"{path}: no HTTP or S3 client in this process")
                continue
            try:
                data = await read_range(self.clients, self.name, path, offset, length)
            except SourceUnavailable as exc:
                failures.append(exc.reason)
                continue
            self.stats.count_request(part, length)
            return data
        raise SourceUnavailable(
            self.name, f"ZipNum part {part!r}: no location could be read ({'; '.join(failures)})"
        )

    def _shard(self, path: str) -> IndexFile:
        shard = self._shards.get(path)
        if shard is None:
            shard = self._shards[path] = IndexFile(path, self.name, self.stat_interval_s)
        return shard

    def _read_local(self, part: str, path: str, offset: int, length: int) -> bytes:
        """One ``pread``; raises OSError (a short read too)."""
        handle = self._shard(path).acquire()
        try:
            data = os.pread(handle.fd, length, offset)
        finally:
            handle.release()
        if len(data) < length:
            raise OSError(f"ends before byte {offset + length}")
        self.stats.count_request(part, length)
        return data

    # -------------------------------------------------------------- the rest
    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """None: captures name WARC files read by the step's ``resource:`` loaders."""
        return ()

    def describe(self) -> str:
        """``zipnum /abs/index.idx (2,645-byte summary, locations from /abs/index.loc)``.

        One ``os.stat`` (the status endpoint calls this on every request).
        """
        try:
            size = os.stat(self.path).st_size
        except OSError as exc:
            return f"zipnum {self.path} (unreadable: {exc.strerror or exc})"
        return f"zipnum {self.path} ({size:,}-byte summary, locations from {self.loc_path})"

    async def aclose(self) -> None:
        """Close the summary and shard file descriptors."""
        self._summary.close()
        for shard in self._shards.values():
            shard.close()
        self._shards = {}
        self._cache.clear()
