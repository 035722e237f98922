"""Where a CDX ``filename`` lives: path prefixes and path-index files.

A :class:`Resolver` turns the ``filename`` field of a capture into candidate
locations, tried in order by :class:`~gateway.loaders.warc.WarcLoader`:
absolute local paths, ``http(s)://`` URLs (read with range requests), or
objects in a storage that open their own ranges
(:class:`~gateway.loaders.warc_sources.RangeLocation`: S3, below).
Behaviour follows pywb's warcserver ``pathresolvers`` module:

``prefix`` (pywb ``PrefixResolver``)
    location = prefix + filename. Shorthand: a directory path, a
    ``file://`` URL, an ``http(s)://`` URL prefix, or any of those behind
    ``warc-prefix+``. A directory gets a trailing ``/`` when it lacks one; a
    URL prefix is used as written (``http://host/get?file=`` is legal).

``path_index`` (pywb ``PathIndexResolver``)
    a text file of ``filename<TAB>location[<TAB>location...]`` lines written
    by the archive's administrator. Shorthand: ``warc-index+file:///path``,
    ``warc-index+/path``, or a plain path to an existing regular file.
    The file is read into a dict once and re-read when its mtime, size or
    inode change (checked at most every ``check_interval_s``), never per
    request.

Safety (:func:`check_filename`): a CDX filename comes from an index that may
be remote or written by others, so a prefix resolver refuses filenames that
are absolute, contain a ``..`` segment, a backslash, a NUL or control
character, or a URL scheme (``x://`` anywhere, ``file:`` or a drive letter
``c:`` at the start), raising
:class:`~gateway.errors.UnsafeFilename`; subdirectories (``2014/a.warc.gz``)
are fine. For local prefixes the joined path is also walked component by
component (one ``lstat`` each): a symlink below the prefix must resolve to a
path under the prefix's real path, unless the prefix is configured with
``follow_symlinks=True`` (an administrator who links WARCs in from elsewhere
says so explicitly). Path-index entries are trusted: they are written by the
administrator, and a filename is only a key into them.

Deliberate differences from pywb: no ``*`` (collection name) substitution in
prefixes; ``file://`` URLs are percent-decoded; relative locations in a path
index are relative to the index file's directory (pywb: the process's working
directory); a path index is read into memory instead of binary-searched on
every request, so it need not be sorted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Final, Literal, Protocol, Self, runtime_checkable
from urllib.parse import quote, unquote

from gateway.clients import SharedClients
from gateway.errors import ArchiveFileNotFound, UnsafeFilename
from gateway.missing_dirs import ensure_directory
from gateway.paths import absolute_path
from gateway.registry import LazyRegistry

if TYPE_CHECKING:
    from gateway.loaders.warc_sources import Location

__all__ = [
    "REDIS_SHORTHAND_PREFIXES",
    "RESOLVER_TYPES",
    "S3_SHORTHAND_PREFIXES",
    "PathIndexResolver",
    "PathIndexResolverConfig",
    "PrefixResolver",
    "PrefixResolverConfig",
    "Resolver",
    "ResolverConfig",
    "ResolverFactory",
    "ResolverKind",
    "build_resolver",
    "check_filename",
    "file_url_to_path",
    "resolver_config_from_shorthand",
    "resolver_kind_for_shorthand",
]

logger = logging.getLogger(__name__)

ResolverKind = Literal["prefix", "path_index", "redis_index", "s3"]

_PREFIX_MARK: Final = "warc-prefix+"
_INDEX_MARK: Final = "warc-index+"
_HTTP_SCHEMES: Final = ("http://", "https://")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
#: ``file:...`` and Windows drives (``c:``); other ``word:`` names are harmless
#: once appended to a prefix (``crawl-2014-01-01T00:00:00.warc.gz`` is legal).
_FILE_OR_DRIVE = re.compile(r"(?i:file:|[a-z]:)")
#: Bytes no filename may contain: NUL, other C0 controls, DEL, backslash.
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\\]")
#: Characters kept as they are when a filename is appended to a URL prefix
#: (RFC 3986 ``pchar`` plus ``/`` and ``%``); ``?``, ``#``, spaces are escaped.
_URL_SAFE: Final = "/%!$&'()*+,;=:@~"


class ResolverConfig(Protocol):
    """A frozen, slotted, keyword-only dataclass holding one resolver's settings."""

    @classmethod
    def from_shorthand(cls, text: str) -> Self: ...


@runtime_checkable
class Resolver(Protocol):
    """Maps a CDX ``filename`` to candidate locations (pywb path resolvers)."""

    async def locate(self, filename: str) -> Sequence[Location]:
        """Candidate locations for ``filename``, best first.

        Each is an absolute local path, an ``http(s)://`` URL or a
        :class:`~gateway.loaders.warc_sources.RangeLocation`; an empty list
        means this resolver does not know the file. Raises
        :class:`~gateway.errors.UnsafeFilename` for a filename that would
        leave the resolver's prefix, and
        :class:`~gateway.errors.ArchiveFileNotFound` when the resolver's own
        data (a path index) cannot be read.
        """
        ...

    def describe(self) -> str:
        """One line for ``gateway check-config``."""
        ...


class ResolverFactory(Protocol):
    """What :data:`RESOLVER_TYPES` maps a type name to."""

    config_type: ClassVar[type[ResolverConfig]]
    #: Shorthand string prefixes that select this type.
    shorthand_prefixes: ClassVar[tuple[str, ...]]

    @classmethod
    def from_config(cls, config: ResolverConfig, *, clients: SharedClients) -> Resolver: ...


# ---------------------------------------------------------------- helpers
def file_url_to_path(text: str) -> str:
    """A local path from a ``file://`` URL (percent-decoded) or a plain path.

    >>> file_url_to_path("file:///data/my%20warcs/")
    '/data/my warcs/'
    >>> file_url_to_path("file://localhost/data/")
    '/data/'
    >>> file_url_to_path("/data/warcs")
    '/data/warcs'

    Raises :class:`ValueError` for a ``file://`` URL naming another host.
    """
    if not text.startswith("file://"):
        return text
    rest = text[len("file://") :]
    host, slash, path = rest.partition("/")
    if host not in ("", "localhost"):
        raise ValueError(
            f"{text!r} names host {host!r}; expected file:///absolute/path "
            "(remote files are read over http(s)://)"
        )
    return unquote(slash + path)


def check_filename(filename: str) -> None:
    """Raise :class:`UnsafeFilename` unless ``filename`` stays below any prefix.

    Refused: empty names, absolute paths, ``..`` segments (also
    percent-encoded), backslashes, control characters, anything containing
    ``://``, and names starting with ``file:`` or a drive letter (``c:``).

    >>> check_filename("2014/crawl-00001.warc.gz")
    >>> check_filename("../etc/passwd")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    gateway.errors.UnsafeFilename: CDX filename '../etc/passwd' contains a '..' segment; ...
    """
    problem = _filename_problem(filename)
    if problem is None and "%" in filename:
        problem = _filename_problem(unquote(filename))
        if problem is not None:
            problem += " once percent-decoded"
    if problem is not None:
        raise UnsafeFilename(
            f"CDX filename {filename!r} {problem}; expected a path relative to the "
            "archive prefix such as 'crawl/file.warc.gz' (fix the index that produced it)",
            {filename: problem},
        )


def _filename_problem(name: str) -> str | None:
    if not name:
        return "is empty"
    if name.startswith("/"):
        return "is an absolute path"
    if _FORBIDDEN.search(name):
        return "contains a backslash or control character"
    if "://" in name or _FILE_OR_DRIVE.match(name):
        return "names a URL scheme or drive"
    if ".." in name and ".." in name.split("/"):
        return "contains a '..' segment"
    return None


# ------------------------------------------------------------------ prefix
@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixResolverConfig:
    """``prefix``: a local directory or an ``http(s)://`` URL prefix.

    ``prefix`` is normalized to an absolute directory path ending in ``/``
    (from a path, relative ones by :mod:`gateway.paths`, or a ``file://`` URL),
    or kept as written for a URL.
    ``follow_symlinks`` lets symlinks below a local prefix point outside it.
    """

    prefix: str
    follow_symlinks: bool = False

    def __post_init__(self) -> None:
        if self.prefix.startswith(_HTTP_SCHEMES):
            if not self.prefix.split("://", 1)[1]:
                raise ValueError(f"URL prefix {self.prefix!r} has no host")
            return
        path = absolute_path(file_url_to_path(self.prefix))
        # Normalized form: an absolute directory path ending in "/".
        object.__setattr__(self, "prefix", path.rstrip("/") + "/")

    @property
    def is_url(self) -> bool:
        return self.prefix.startswith(_HTTP_SCHEMES)

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """Parse ``[warc-prefix+]DIR | file://DIR | http(s)://URL-PREFIX``.

        A relative directory is made absolute (:mod:`gateway.paths`).

        >>> PrefixResolverConfig.from_shorthand("warc-prefix+https://example.org/w/").prefix
        'https://example.org/w/'
        >>> PrefixResolverConfig.from_shorthand("file:///data/warcs").prefix
        '/data/warcs/'
        """
        body = text[len(_PREFIX_MARK) :] if text.startswith(_PREFIX_MARK) else text
        expected = (
            "expected a directory path, file:///dir/, http(s)://host/prefix/ "
            "or warc-prefix+ followed by one of those"
        )
        if not body.strip():
            raise ValueError(f"empty WARC prefix {text!r}; {expected}")
        if body.startswith(_HTTP_SCHEMES):
            if not body.split("://", 1)[1]:
                raise ValueError(f"URL prefix {text!r} has no host; {expected}")
            return cls(prefix=body)
        if _SCHEME.match(body) and not body.startswith("file:"):
            raise ValueError(f"unsupported scheme in WARC prefix {text!r}; {expected}")
        if body.startswith("file:") and not body.startswith("file://"):
            raise ValueError(f"malformed file URL {text!r}; {expected}")
        return cls(prefix=file_url_to_path(body))


class PrefixResolver:
    """``prefix + filename`` after :func:`check_filename` (pywb ``PrefixResolver``).

    Local prefixes return the path with symlinks below the prefix resolved
    (at most one ``lstat`` per path component, no other I/O); a missing file
    is still returned, so the loader can report where it looked.
    """

    config_type: ClassVar[type[ResolverConfig]] = PrefixResolverConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = (
        _PREFIX_MARK,
        "http://",
        "https://",
        "file://",
    )

    def __init__(self, config: PrefixResolverConfig) -> None:
        self.config = config
        self._url = config.is_url
        # The prefix itself is the administrator's: resolve its symlinks once.
        if not self._url and not os.path.exists(config.prefix):
            # A fresh default config serves ./archive/warcs/ before any WARC is copied
            # there: create a missing directory, as a directory index ending in "/" is.
            try:
                ensure_directory(config.prefix, "resource directory")
            except OSError as exc:
                raise ValueError(
                    f"resource directory {config.prefix} does not exist and cannot be "
                    f"created: {exc.strerror}"
                ) from exc
        self._root = config.prefix if self._url else os.path.realpath(config.prefix) + "/"

    @classmethod
    def from_config(cls, config: ResolverConfig, *, clients: SharedClients) -> Resolver:
        if not isinstance(config, PrefixResolverConfig):
            raise TypeError(f"expected PrefixResolverConfig, got {type(config).__name__}")
        return cls(config)

    async def locate(self, filename: str) -> list[str]:
        check_filename(filename)
        if self._url:
            return [self._root + quote(filename, safe=_URL_SAFE)]
        return [self._local_path(filename)]

    def _local_path(self, filename: str) -> str:
        root = self._root
        current = root[:-1]
        parts = filename.split("/")
        for index, part in enumerate(parts):
            if part in ("", "."):
                continue
            candidate = f"{current}/{part}"
            try:
                mode = os.lstat(candidate).st_mode
            except OSError:
                # Missing (or unreadable): nothing below it can be a symlink.
                rest = "/".join(p for p in parts[index + 1 :] if p not in ("", "."))
                return f"{candidate}/{rest}" if rest else candidate
            if stat.S_ISLNK(mode):
                target = os.path.realpath(candidate)
                if not self.config.follow_symlinks and not (target + "/").startswith(root):
                    raise UnsafeFilename(
                        f"CDX filename {filename!r} reaches {target!r} through the symlink "
                        f"{candidate!r}, outside the prefix {self.config.prefix!r}; set "
                        "follow_symlinks: true on this prefix to allow it",
                        {filename: "symlink leaves the prefix"},
                    )
                candidate = target
            current = candidate
        return current

    def describe(self) -> str:
        if self._url:
            return f"prefix {self.config.prefix} (HTTP range requests)"
        state = "" if os.path.isdir(self._root) else " (directory does not exist yet)"
        links = ", follows symlinks out" if self.config.follow_symlinks else ""
        return f"prefix {self.config.prefix} (local directory{links}){state}"

    def __repr__(self) -> str:
        return f"PrefixResolver({self.config.prefix!r})"


# -------------------------------------------------------------- path index
@dataclass(frozen=True, slots=True, kw_only=True)
class PathIndexResolverConfig:
    """``path_index``: an administrator's ``filename<TAB>location...`` file.

    ``path`` is made absolute (:mod:`gateway.paths`); the file is re-read when
    it changes, checked at most every ``check_interval_s`` seconds.
    """

    path: str
    check_interval_s: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", absolute_path(self.path))
        if self.check_interval_s < 0:
            raise ValueError(f"check_interval_s {self.check_interval_s}: expected >= 0")

    @classmethod
    def from_shorthand(cls, text: str) -> Self:
        """Parse ``warc-index+file:///path``, ``warc-index+/path`` or a plain path.

        >>> PathIndexResolverConfig.from_shorthand("warc-index+file:///data/paths.txt").path
        '/data/paths.txt'
        """
        body = text[len(_INDEX_MARK) :] if text.startswith(_INDEX_MARK) else text
        expected = "expected warc-index+file:///path/to/index.txt or a path to an index file"
        if not body.strip():
            raise ValueError(f"empty path index {text!r}; {expected}")
        if body.startswith(_HTTP_SCHEMES) or (
            _SCHEME.match(body) and not body.startswith("file://")
        ):
            raise ValueError(f"path index {text!r} must be a local file; {expected}")
        return cls(path=file_url_to_path(body))


@dataclass(frozen=True, slots=True)
class _Stamp:
    mtime_ns: int
    size: int
    inode: int


class PathIndexResolver:
    """Looks ``filename`` up in a path-index file (pywb ``PathIndexResolver``).

    Each line is ``filename<TAB>location[<TAB>location...]``; every location
    of every line for a filename is returned in file order. Locations are
    ``http(s)://`` URLs, ``file://`` URLs or paths (relative ones are taken
    relative to the index file's directory). Blank lines and lines starting
    with ``#`` are skipped.
    """

    config_type: ClassVar[type[ResolverConfig]] = PathIndexResolverConfig
    shorthand_prefixes: ClassVar[tuple[str, ...]] = (_INDEX_MARK,)

    def __init__(self, config: PathIndexResolverConfig) -> None:
        self.config = config
        self._entries: Mapping[str, tuple[str, ...]] = {}
        self._stamp: _Stamp | None = None
        self._checked_at = float("-inf")
        self._lock = asyncio.Lock()

    @classmethod
    def from_config(cls, config: ResolverConfig, *, clients: SharedClients) -> Resolver:
        if not isinstance(config, PathIndexResolverConfig):
            raise TypeError(f"expected PathIndexResolverConfig, got {type(config).__name__}")
        return cls(config)

    async def locate(self, filename: str) -> list[str]:
        if time.monotonic() - self._checked_at >= self.config.check_interval_s:
            await self._refresh()
        return list(self._entries.get(filename, ()))

    async def _refresh(self) -> None:
        async with self._lock:
            now = time.monotonic()
            if now - self._checked_at < self.config.check_interval_s:
                return  # another request refreshed while we waited
            path = self.config.path
            try:
                st = os.stat(path)
            except OSError as exc:
                raise ArchiveFileNotFound(
                    f"path index {path} cannot be read: {exc.strerror or exc}; "
                    "fix the resource: entry or restore the file",
                    {path: str(exc)},
                ) from exc
            stamp = _Stamp(st.st_mtime_ns, st.st_size, st.st_ino)
            if stamp != self._stamp:
                try:
                    entries = await asyncio.to_thread(_read_path_index, path)
                except OSError as exc:
                    raise ArchiveFileNotFound(
                        f"path index {path} cannot be read: {exc.strerror or exc}",
                        {path: str(exc)},
                    ) from exc
                self._entries = entries
                self._stamp = stamp
                logger.info("path index %s: %d filenames loaded", path, len(entries))
            self._checked_at = now

    def describe(self) -> str:
        return f"path index {self.config.path}"

    def __repr__(self) -> str:
        return f"PathIndexResolver({self.config.path!r})"


def _read_path_index(path: str) -> dict[str, tuple[str, ...]]:
    base = os.path.dirname(path)
    entries: dict[str, list[str]] = {}
    with open(path, encoding="utf-8", errors="surrogateescape") as lines:
        for line in lines:
            line = line.rstrip("\r\n")
            if not line or line.startswith("#"):
                continue
            name, *locations = line.split("\t")
            found = entries.setdefault(name, [])
            for location in locations:
                if not location:
                    continue
                if location.startswith(_HTTP_SCHEMES):
                    found.append(location)
                    continue
                try:
                    local = file_url_to_path(location)
                except ValueError:
                    logger.warning("path index %s: skipping location %r", path, location)
                    continue
                found.append(os.path.normpath(os.path.join(base, local)))
    return {name: tuple(locations) for name, locations in entries.items()}


# ---------------------------------------------------------------- registry
# Redis's and S3's modules (redis-py, botocore's) are imported only for a config
# that uses them.
RESOLVER_TYPES: Final = LazyRegistry[type[ResolverFactory]](
    {
        "prefix": "gateway.loaders.resolvers:PrefixResolver",
        "path_index": "gateway.loaders.resolvers:PathIndexResolver",
        "redis_index": "gateway.loaders.redis_resolver:RedisResolver",
        "s3": "gateway.loaders.s3_resolver:S3Resolver",
    }
)

#: ``RedisResolver.shorthand_prefixes``, known without importing redis-py
#: (``tests/loaders/test_redis_resolver.py`` checks they agree).
REDIS_SHORTHAND_PREFIXES: Final = (
    "warc-index+redis://",
    "warc-index+rediss://",
    "redis://",
    "rediss://",
)

#: ``S3Resolver.shorthand_prefixes``, known without importing the S3 storage
#: (``tests/loaders/test_s3_resolver.py`` checks they agree).
S3_SHORTHAND_PREFIXES: Final = ("s3://", "s3+http://", "s3+https://")


def resolver_kind_for_shorthand(text: str) -> ResolverKind:
    """Which resolver type a ``resource:`` string selects (pywb ``make_best_resolver``).

    ``warc-index+`` selects a path index; ``warc-prefix+``, ``http(s)://`` and
    ``file://`` a prefix; a plain path naming an existing regular file a path
    index; anything else a prefix (a directory). ``warc-index+redis://`` and
    ``redis://`` select a Redis hash (:mod:`gateway.loaders.redis_resolver`),
    ``s3://`` and ``s3+http(s)://`` a bucket and prefix
    (:mod:`gateway.loaders.s3_resolver`).

    >>> resolver_kind_for_shorthand("warc-index+file:///data/paths.txt")
    'path_index'
    >>> resolver_kind_for_shorthand("https://example.org/warcs/")
    'prefix'
    """
    if text.startswith(REDIS_SHORTHAND_PREFIXES):
        return "redis_index"
    if text.startswith(S3_SHORTHAND_PREFIXES):
        return "s3"
    if text.startswith(_INDEX_MARK):
        return "path_index"
    if text.startswith((_PREFIX_MARK, *_HTTP_SCHEMES, "file://")):
        return "prefix"
    if os.path.isfile(text):
        return "path_index"
    return "prefix"


def resolver_config_from_shorthand(text: str) -> ResolverConfig:
    """The config a ``resource:`` string stands for (detection, then ``from_shorthand``).

    Raises :class:`ValueError` naming the expected forms.
    """
    return RESOLVER_TYPES[resolver_kind_for_shorthand(text)].config_type.from_shorthand(text)


def build_resolver(config: ResolverConfig, *, clients: SharedClients) -> Resolver:
    """The resolver for ``config``, found by its config type in :data:`RESOLVER_TYPES`.

    Raises :class:`TypeError` for a config type no registered resolver takes.
    """
    for factory in RESOLVER_TYPES.values():
        if type(config) is factory.config_type:
            return factory.from_config(config, clients=clients)
    raise TypeError(f"no resolver type in RESOLVER_TYPES takes {type(config).__name__}")
