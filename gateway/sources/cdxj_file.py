"""Local sorted CDXJ / legacy CDX index files, and directories of them.

Behaviour follows pywb's warcserver ``FileIndexSource`` (one file, read with
``pywb.utils.binsearch.iter_range``) and ``DirectoryIndexSource`` (every index
file of one directory, named by its file name in the ``source`` field).

Reading (:mod:`gateway.sources.cdxj_scan`): a plain file is binary-searched
in 8 KiB blocks exactly as pywb's ``binsearch_offset`` does, with ``pread``
on one file descriptor per version of the file. An exact lookup costs about
30 us of CPU in a 200 MB file (page-cached), plus ~1 us to parse each
matching line (the JSON block is decoded only when a field is read; see
:class:`~gateway.cdx.cdxj.CdxRecord`). Long ranges are read in chunks of up to
64 KiB and yielded record by record, never accumulated. The reads happen
inline in the event loop ("a seek and a bounded read"), with a checkpoint
(``await asyncio.sleep(0)``) after every 64 KiB read.

Gzip-compressed files (detected by their magic bytes ``1f 8b``, whatever
their name) cannot be binary-searched: every lookup decompresses from the
start and stops at the first line past the range, so it costs CPU in
proportion to the position of the range in the uncompressed file (about
0.25 s per 100 MB of CDXJ on one core, measured). Use them only for small
indexes; ``gunzip`` larger ones (or cluster them: :mod:`gateway.sources.zipnum`).

Deliberate difference from pywb: lines that sort before ``query.key`` but
appear after the first matching line (an unsorted file) are skipped instead of
yielded, so every record is inside ``[key, end_key)``; the first such line
logs a WARNING naming the file and how to sort it.
"""

from __future__ import annotations

import logging
import os
import stat
import time
import zlib
from collections.abc import AsyncIterator, Generator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Self
from urllib.parse import unquote

from gateway.cdx.cdxj import CdxRecord
from gateway.cdx.cdxops import LocalScan
from gateway.cdx.query import CaptureQuery
from gateway.clients import SharedClients
from gateway.errors import SourceUnavailable
from gateway.loaders.base import ResourceLoader
from gateway.missing_dirs import ensure_directory
from gateway.paths import absolute_path
from gateway.sources.base import IndexSource, SourceConfig
from gateway.sources.cdxj_scan import (
    CDX_HEADERS,
    GZIP_MAGIC,
    MAX_READ_BYTES,
    Handle,
    IndexFile,
    encode_key,
    merge_scans,
    scan_file,
    unavailable,
)
from gateway.sources.range_memo import RangeMemo

__all__ = [
    "INDEX_SUFFIXES",
    "CdxjDirectorySource",
    "CdxjFileSource",
    "FileSourceConfig",
]

logger = logging.getLogger(__name__)

#: File names a directory source reads (pywb ``FileIndexSource.CDX_EXT`` plus gzip).
#: Directory members, as pywb's ``CacheDirectoryIndexSource`` (``.gz`` indexes
#: are served when configured as a file, not picked up from a directory).
INDEX_SUFFIXES: Final = (".cdx", ".cdxj")

#: A directory modified this recently may change again within the same mtime
#: tick (coarse filesystem clocks, FAT's 2 s): its listing is not trusted.
_RACY_NS: Final = 2_000_000_000
#: Default of ``stat_interval_s``: a changed index file or directory is seen within 1 s.
STAT_INTERVAL_S: Final = 1.0


def check_stat_interval(seconds: float) -> None:
    """Raise :class:`ValueError` unless ``seconds`` (a source's ``stat_interval_s``:
    how often a lookup asks ``os.stat`` whether its files changed) is 0 to 3600."""
    if not 0 <= seconds <= 3600:
        raise ValueError(f"stat_interval_s {seconds!r}: expected 0 to 3600 seconds")


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSourceConfig:
    """A local CDXJ/CDX index file or a directory of them.

    ``path`` is a filesystem path, made absolute when the config is loaded
    (:mod:`gateway.paths`: relative to the working directory, as in pywb).
    ``stat_interval_s``: how often (seconds) a lookup checks with ``os.stat``
    whether the file, or the directory's listing and files, changed; a
    replaced, appended, added or removed index file is seen within that
    time. 0 checks on every lookup (one or two system calls each).
    """

    path: str
    stat_interval_s: float = STAT_INTERVAL_S

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("empty index path; expected a CDXJ/CDX file or directory path")
        object.__setattr__(self, "path", absolute_path(self.path))
        check_stat_interval(self.stat_interval_s)

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """Parse a path or a ``file://`` URL (pywb ``FileIndexSource.init_from_string``).

        >>> FileSourceConfig.from_shorthand("file:///srv/indexes/iana.cdxj")
        FileSourceConfig(path='/srv/indexes/iana.cdxj', stat_interval_s=1.0)
        >>> FileSourceConfig.from_shorthand("/srv/indexes/")
        FileSourceConfig(path='/srv/indexes/', stat_interval_s=1.0)

        ``file://`` URLs must be absolute (``file:///abs/path`` or
        ``file://localhost/abs/path``) and are percent-decoded; plain paths are
        made absolute (:mod:`gateway.paths`). Raises :class:`ValueError` otherwise.
        """
        if text.startswith("file://"):
            rest = text[len("file://") :]
            if rest.startswith("localhost/"):
                rest = rest[len("localhost") :]
            if not rest.startswith("/"):
                raise ValueError(
                    f"{text!r}: a file:// URL must hold an absolute path "
                    f"(file:///abs/path.cdxj); write a relative path without file://"
                )
            return cls(path=unquote(rest))
        if "://" in text:
            raise ValueError(f"{text!r} is not a file path; expected a path or file:///abs/path")
        return cls(path=text)


class CdxjFileSource:
    """One sorted CDXJ or legacy CDX (9, 10, 11 fields) file (pywb ``FileIndexSource``).

    :meth:`lookup` yields a :class:`CdxRecord` for every line with
    ``query.key <= line < query.end_key`` (byte comparison of the whole line,
    pywb ``iter_range``), in file order, which is (urlkey, timestamp) order for
    a sorted file. A header line (``" CDX ..."``) and blank lines are skipped.
    Only the key range is used; the aggregator applies the other parameters.

    Raises :class:`SourceUnavailable` when the file is missing or unreadable
    at lookup time, :class:`SourceBadAnswer` (naming file and byte offset)
    when a line in the range does not parse. The file is reopened when it is
    replaced or modified (inode, mtime, size), seen by one ``os.stat`` at most
    every ``stat_interval_s`` seconds (on every lookup when 0).
    """

    config_type: ClassVar[type[SourceConfig]] = FileSourceConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = ("file://",)

    def __init__(self, path: str, *, name: str, stat_interval_s: float = STAT_INTERVAL_S) -> None:
        self.name = name
        self.path = os.path.abspath(path)
        self._file = IndexFile(self.path, source=name, stat_interval_s=stat_interval_s)
        #: Short answers by version (:class:`RangeMemo`; its counters go to ``/metrics``).
        self.memo = RangeMemo()

    @classmethod
    def from_config(cls, config: SourceConfig, *, name: str, clients: SharedClients) -> IndexSource:
        """A file source when ``config.path`` is a file, a directory source for a directory.

        A missing path ending in ``/`` is created (with parents) as an empty
        directory, so a fresh default configuration runs. Raises
        :class:`ValueError` when the path does not exist otherwise, or is
        neither a regular file nor a directory.
        """
        if not isinstance(config, FileSourceConfig):
            raise TypeError(f"expected FileSourceConfig, got {type(config).__name__}")
        path = os.path.abspath(config.path)
        interval_s = config.stat_interval_s
        if os.path.isdir(path):
            return CdxjDirectorySource(path, name=name, stat_interval_s=interval_s)
        if os.path.isfile(path):
            return cls(path, name=name, stat_interval_s=interval_s)
        if os.path.lexists(path):
            raise ValueError(f"index path {path} is neither a regular file nor a directory")
        if config.path.endswith(("/", os.sep)):
            try:
                ensure_directory(path, "index directory")
            except OSError as exc:
                raise ValueError(
                    f"cannot create index directory {path}: {exc.strerror or exc}"
                ) from exc
            return CdxjDirectorySource(path, name=name, stat_interval_s=interval_s)
        raise ValueError(
            f"index path {path} does not exist; expected a CDXJ/CDX file or a "
            f"directory (end the path with '/' to have an empty directory created)"
        )

    def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Records in ``[query.key, query.end_key)`` in file order (see class doc),
        as a :class:`~gateway.cdx.cdxops.LocalScan` (no await per record)."""
        return LocalScan(self._scan(encode_key(query.key), encode_key(query.end_key)))

    def _scan(self, key: bytes, end: bytes) -> Generator[CdxRecord | None, None, None]:
        if key >= end:
            return
        try:
            handle = self._file.acquire()
        except OSError as exc:
            raise unavailable(self.name, self.path, exc) from exc
        try:
            yield from scan_file(handle, key, end, source=self.name, label=None, memo=self.memo)
        finally:
            handle.release()

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """None: captures name WARC files read by the step's ``resource:`` loaders."""
        return ()

    def describe(self) -> str:
        """``file /abs/path/iana.cdxj (CDXJ, 43.1 kB)``."""
        return f"file {self.path} ({_describe_file(self.path)})"

    async def aclose(self) -> None:
        """Close the file descriptor (after the lookups still reading it finish)."""
        self._file.close()

    def __repr__(self) -> str:
        return f"CdxjFileSource({self.path!r}, name={self.name!r})"


class CdxjDirectorySource:
    """Every index file directly in one directory (pywb ``DirectoryIndexSource``).

    Index files are those named ``*.cdx``, ``*.cdxj``, ``*.cdx.gz`` or
    ``*.cdxj.gz``, not hidden, not in subdirectories. :meth:`lookup` merges
    their records (each read as by :class:`CdxjFileSource`) by (urlkey,
    timestamp), ties broken by file name order, and sets ``source``
    to the file name (``iana.cdxj``); the aggregator prefixes the member name.

    The listing is re-read only when the directory's mtime changes, checked
    with one ``os.stat`` at most every ``stat_interval_s`` seconds (on every
    lookup when 0), as each file is (:class:`CdxjFileSource`). Raises
    :class:`SourceUnavailable` when the directory or one of its files cannot
    be read, :class:`SourceBadAnswer` for an unparseable line; a file removed
    since the listing is skipped.
    """

    def __init__(self, path: str, *, name: str, stat_interval_s: float = STAT_INTERVAL_S) -> None:
        self.name = name
        self.path = os.path.abspath(path)
        self.stat_interval_s = stat_interval_s
        self._members: dict[str, IndexFile] = {}
        #: One memo for every file (versions of files differ by inode); ``/metrics``.
        self.memo = RangeMemo()
        self._member_list: list[tuple[str, IndexFile]] = []
        self._listing: tuple[int, int, int] | None = None
        self._listed_until = 0.0
        self._racy = True
        self._closed = False

    def lookup(self, query: CaptureQuery) -> AsyncIterator[CdxRecord]:
        """Records in ``[query.key, query.end_key)`` by (urlkey, timestamp, file name),
        as a :class:`~gateway.cdx.cdxops.LocalScan` (no await per record)."""
        return LocalScan(self._merged(encode_key(query.key), encode_key(query.end_key)))

    def _merged(self, key: bytes, end: bytes) -> Generator[CdxRecord | None, None, None]:
        if key >= end:
            return
        if self._closed:
            raise SourceUnavailable(self.name, f"index directory {self.path} was closed")
        try:
            members = self._current_members()
        except OSError as exc:
            raise SourceUnavailable(
                self.name, f"cannot list index directory {self.path}: {exc.strerror or exc}"
            ) from exc
        handles: list[Handle] = []
        scans: list[Generator[CdxRecord | None, None, None]] = []
        try:
            for file_name, member in members:
                try:
                    handle = member.acquire()
                except FileNotFoundError:
                    continue  # removed since the listing was read
                except OSError as exc:
                    raise unavailable(self.name, member.path, exc) from exc
                handles.append(handle)
                scan = scan_file(
                    handle, key, end, source=self.name, label=file_name, memo=self.memo
                )
                scans.append(scan)
            yield from merge_scans(scans)
        finally:
            for scan in scans:
                scan.close()
            for handle in handles:
                handle.release()

    def resource_loaders(self) -> Sequence[ResourceLoader]:
        """None: captures name WARC files read by the step's ``resource:`` loaders."""
        return ()

    def describe(self) -> str:
        """``directory /abs/dir (3 index files)``."""
        try:
            count = len(_list_index_files(self.path))
        except OSError as exc:
            return f"directory {self.path} (unreadable: {exc.strerror or exc})"
        return f"directory {self.path} ({count} index file{'' if count == 1 else 's'})"

    async def aclose(self) -> None:
        """Close every file descriptor (after the lookups still reading them finish)."""
        self._closed = True
        for member in self._members.values():
            member.close()
        self._members = {}
        self._member_list = []

    def __repr__(self) -> str:
        return f"CdxjDirectorySource({self.path!r}, name={self.name!r})"

    def _current_members(self) -> list[tuple[str, IndexFile]]:
        """The directory's index files by name, listed again when it changed
        (checked at most every ``stat_interval_s``); the list is not to be changed."""
        interval_s = self.stat_interval_s
        if interval_s and self._listing is not None and time.monotonic() < self._listed_until:
            return self._member_list
        st = os.stat(self.path)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(20, "not a directory")
        listing = (st.st_dev, st.st_ino, st.st_mtime_ns)
        if listing != self._listing or self._racy:
            previous = self._members
            self._members = {}
            for file_name in _list_index_files(self.path):
                member = previous.pop(file_name, None)
                if member is None:
                    member = IndexFile(
                        os.path.join(self.path, file_name), self.name, self.stat_interval_s
                    )
                self._members[file_name] = member
            for gone in previous.values():
                gone.close()
            self._member_list = list(self._members.items())
            self._listing = listing
            self._racy = time.time_ns() - st.st_mtime_ns < _RACY_NS
        if interval_s:
            self._listed_until = time.monotonic() + interval_s
        return self._member_list


# ---------------------------------------------------------------- describing
def _list_index_files(path: str) -> list[str]:
    """Index file names directly in ``path``, sorted; hidden files excluded."""
    with os.scandir(path) as entries:
        names = [
            entry.name
            for entry in entries
            if entry.name.endswith(INDEX_SUFFIXES)
            and not entry.name.startswith(".")
            and entry.is_file()
        ]
    return sorted(names)


def _describe_file(path: str) -> str:
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as fh:
            head = fh.read(MAX_READ_BYTES)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    return f"{_sniff_format(head)}, {_human_size(size)}"


def _sniff_format(head: bytes) -> str:
    """``CDXJ`` or ``CDX`` from the first index line; ``gzip ..., linear scan`` when compressed.

    >>> _sniff_format(b' CDX N b a m s k r M S V g\\ncom,example)/ 2014 http://x/ text/html')
    'CDX'
    """
    gz = head.startswith(GZIP_MAGIC)
    if gz:
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, MAX_READ_BYTES)
        except zlib.error:
            return "corrupt gzip"
    kind = "empty"
    for line in head.splitlines():
        if line and not line.startswith(CDX_HEADERS):
            parts = line.split(b" ", 2)
            kind = "CDXJ" if len(parts) == 3 and parts[2].startswith(b"{") else "CDX"
            break
    return f"gzip {kind}, linear scan" if gz else kind


def _human_size(size: int) -> str:
    """Decimal units, one decimal.

    >>> _human_size(43062), _human_size(999), _human_size(1_234_567_890)
    ('43.1 kB', '999 B', '1.2 GB')
    """
    if size < 1000:
        return f"{size} B"
    value = size / 1000
    for unit in ("kB", "MB", "GB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"
