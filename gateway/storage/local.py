"""A storage in a local directory (a second disk, a mounted backup volume).

``store.storages.<name>: {type: local, path: /mnt/backup/warcs}``. Objects are
files under ``path`` (a name ``a/b.warc.gz`` is the file ``path/a/b.warc.gz``).

A put follows borg and restic: the bytes go to a temporary file in the
object's directory, ``.{file name}.{32 hex digits}.part`` (hidden, so never an
object name), created exclusively (``O_EXCL``), hashed as they are written;
then the size and SHA-256 are checked, the file is fsynced and **hard-linked**
to its final name, which fails if the name exists (``link(2)`` never
replaces, unlike ``rename(2)``), the directory is fsynced and the temporary
name removed. A put that fails, is cancelled or checks out wrong removes its
temporary file; one killed with SIGKILL leaves it behind for
:meth:`LocalStorage.remove_leftovers`. So a final name only ever holds a
complete, verified, durable file, and two concurrent puts of one name cannot
both create it: the second finds the first's file and compares digests.

The directory must exist: the storage does not create it, so a backup disk
that is not mounted is reported as unavailable instead of being filled in on
the root file system. Blocking file work runs in a small thread pool, one
operation per file at a time; a file is closed only once the operation in
flight on it has returned, even when its task is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import re
import secrets
import stat
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, Self, TypeVar

from gateway.paths import absolute_path
from gateway.storage.base import (
    Backend,
    Intake,
    ObjectInfo,
    PutOutcome,
    PutResult,
    RangeReader,
    check_name,
    check_range,
    settle_taken,
)
from gateway.storage.errors import (
    ObjectNotFound,
    RangeNotSatisfiable,
    StorageError,
    StorageRefused,
    StorageUnavailable,
)
from gateway.storage.settings import SettingError

__all__ = ["TEMP_SUFFIX", "LocalStorage", "LocalStorageConfig"]

TEMP_SUFFIX: Final = ".part"
#: Temporary names this storage writes: ``.{file name}.{32 hex}.part``.
_TEMP_NAME = re.compile(r"\.(?P<final>.+)\.[0-9a-f]{32}" + re.escape(TEMP_SUFFIX))
CHUNK_BYTES: Final = 1 << 20
#: Writeback of a put's file is started every this many bytes (see ``_hash_and_write``).
WRITEBACK_BYTES: Final = 8 << 20
#: errno values an operator must act on; any other OSError may pass (retry).
_LASTING_ERRNOS: Final = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENOTDIR,
        errno.ENAMETOOLONG,
        errno.EISDIR,
        errno.EXDEV,
        errno.EMLINK,
        errno.ENOTSUP,
    }
)

_T = TypeVar("_T")
_executor: ThreadPoolExecutor | None = None


def _io() -> ThreadPoolExecutor:
    """The thread pool for local storage file work (created on first use)."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="storage-local")
    return _executor


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalStorageConfig:
    """``{type: local, path: DIR}``: an existing directory, made absolute when the
    config is loaded (:mod:`gateway.paths`)."""

    path: str

    def __post_init__(self) -> None:
        if not self.path:
            raise SettingError("path", "empty; expected an existing directory such as /srv/backup")
        object.__setattr__(self, "path", absolute_path(self.path))


class _Handle:
    """A file descriptor used from worker threads, one operation at a time.

    :meth:`close` never closes the descriptor under an operation still
    running in a thread (its task may have been cancelled): it closes it, and
    runs ``then``, once that operation has returned.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pending: Future[Any] | None = None

    async def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        self._pending = _io().submit(fn, *args)
        return await asyncio.wrap_future(self._pending)

    def close(self, then: Callable[[], None] | None = None) -> None:
        def finish(_: object = None) -> None:
            os.close(self.fd)
            if then is not None:
                then()

        if self._pending is not None:
            self._pending.add_done_callback(finish)  # at once if it is done
        else:
            finish()


def _hash_and_write(fd: int, chunk: bytes, written: int, digest: Any) -> None:
    """Hash ``chunk`` and write it at the end of ``fd`` (``written`` bytes so far);
    every :data:`WRITEBACK_BYTES`, start the kernel's writeback of what came before.

    One thread does both: hashing in a second thread measured no faster on two
    cores, and costs a second wake-up per chunk.

    ``POSIX_FADV_DONTNEED`` on dirty pages starts their writeback without
    waiting for it (Linux), so the final fsync has little left to do, and a
    replica's pages leave the page cache instead of pushing out the store's.
    """
    digest.update(chunk)
    view = memoryview(chunk)
    while view:
        view = view[os.write(fd, view) :]
    end = written + len(chunk)
    if end // WRITEBACK_BYTES > written // WRITEBACK_BYTES:
        start = max(0, (end // WRITEBACK_BYTES - 1) * WRITEBACK_BYTES)
        with contextlib.suppress(OSError):  # advice only; fsync is what makes it durable
            os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStorage(Backend):
    """Objects as files under one existing directory (see the module docstring)."""

    config_type: ClassVar[type[LocalStorageConfig]] = LocalStorageConfig
    #: Directory entries read per hop to the thread pool by :meth:`iter`.
    page_size: int = 1000

    def __init__(self, name: str, config: LocalStorageConfig) -> None:
        self.name = name
        self.config = config
        self.root = Path(config.path).absolute()

    @classmethod
    async def open(cls, name: str, config: LocalStorageConfig) -> Self:
        """Open the storage; raises :class:`StorageUnavailable` when the directory is missing."""
        storage = cls(name, config)
        await storage._check_root()
        return storage

    @classmethod
    def describe_config(cls, config: LocalStorageConfig) -> str:
        return f"local directory {Path(config.path).absolute()}"

    def describe(self) -> str:
        return self.describe_config(self.config)

    async def close(self) -> None:
        return None

    # -- errors and paths -----------------------------------------------------------
    def _error(self, name: str, exc: OSError, doing: str) -> StorageError:
        problem = f"{doing}: {exc.strerror or exc} (errno {exc.errno})"
        if exc.errno == errno.ENOENT:
            return ObjectNotFound(self.name, name, "no such object")
        if exc.errno in _LASTING_ERRNOS:
            return StorageRefused(self.name, name, problem)
        return StorageUnavailable(self.name, name, problem)

    async def _check_root(self) -> None:
        def check() -> None:
            if not self.root.is_dir():
                raise FileNotFoundError(errno.ENOENT, "missing", str(self.root))

        try:
            await asyncio.wrap_future(_io().submit(check))
        except OSError as exc:
            raise StorageUnavailable(
                self.name,
                "",
                f"the directory {self.root} does not exist or is not a directory "
                "(a backup disk not mounted?); it is never created by the gateway: "
                "create it or fix store.storages path",
            ) from exc

    def _path(self, name: str) -> Path:
        return self.root / check_name(self.name, name)

    async def _lookup(self, name: str) -> ObjectInfo | None:
        path = self._path(name)
        try:
            st = await asyncio.wrap_future(_io().submit(os.lstat, path))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error(name, exc, "stat") from exc
        if not stat.S_ISREG(st.st_mode):
            raise StorageRefused(self.name, name, "not a regular file; left as it is")
        return ObjectInfo(name=name, size=st.st_size, mtime=st.st_mtime)

    # -- reading ----------------------------------------------------------------------
    async def get_range(
        self, name: str, offset: int = 0, length: int | None = None
    ) -> AsyncGenerator[bytes, None]:
        check_range(offset, length)
        path = self._path(name)
        try:
            fd = await asyncio.wrap_future(
                _io().submit(os.open, path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            )
        except OSError as exc:
            raise self._error(name, exc, "open") from exc
        handle = _Handle(fd)
        try:
            size = (await handle.call(os.fstat, fd)).st_size
            end = size if length is None else offset + length
            if offset > size or end > size:
                raise RangeNotSatisfiable(
                    self.name, name, f"holds {size} bytes; asked for [{offset}, {end})"
                )
            position = offset
            while position < end:
                try:
                    data = await handle.call(
                        os.pread, fd, min(CHUNK_BYTES, end - position), position
                    )
                except OSError as exc:
                    raise self._error(name, exc, f"read at {position}") from exc
                if not data:
                    raise RangeNotSatisfiable(
                        self.name, name, f"ended at {position} while reading [{offset}, {end})"
                    )
                position += len(data)
                yield data
        finally:
            handle.close()

    async def open_range(self, name: str, offset: int, length: int | None = None) -> RangeReader:
        """See :meth:`Storage.open_range`: a file descriptor read with ``pread``.

        Opening and reading happen in the calling thread (an ``open`` and a
        ``pread`` from the page cache cost microseconds; a record loader
        moves long reads to its own threads through ``read_blocking``).
        """
        check_range(offset, length)
        path = self._path(name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as exc:
            raise self._error(name, exc, "open") from exc
        try:
            size = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise self._error(name, exc, "stat") from exc
        end = size if length is None else offset + length
        if offset > size or end > size:
            os.close(fd)
            raise RangeNotSatisfiable(
                self.name, name, f"holds {size} bytes; asked for [{offset}, {end})"
            )
        return _LocalRange(self, name, fd, offset, end)

    async def iter(self, prefix: str = "") -> AsyncGenerator[ObjectInfo, None]:
        await self._check_root()
        # Start in the deepest directory the prefix names whole.
        start = prefix.rpartition("/")[0]
        walker = _walk(self.root, self.root / start if start else self.root, prefix)
        handle_pending: Future[list[ObjectInfo]] | None = None
        try:
            while True:
                handle_pending = _io().submit(_next_batch, walker, self.page_size)
                try:
                    batch = await asyncio.wrap_future(handle_pending)
                except OSError as exc:
                    raise self._error(prefix, exc, "list") from exc
                if not batch:
                    return
                for info in batch:
                    yield info
        finally:
            if handle_pending is not None:
                handle_pending.add_done_callback(lambda _: walker.close())
            else:
                walker.close()

    # -- writing ----------------------------------------------------------------------
    async def _create(
        self, name: str, data: AsyncIterable[bytes], size: int, sha256: str, replacing: bool
    ) -> PutResult:
        final = self._path(name)
        await self._check_root()
        try:
            await asyncio.wrap_future(_io().submit(self._make_parents, final.parent))
            temp = final.parent / f".{final.name}.{secrets.token_hex(16)}{TEMP_SUFFIX}"
            fd = await asyncio.wrap_future(
                _io().submit(
                    os.open, temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644
                )
            )
        except OSError as exc:
            raise self._error(name, exc, "create a temporary file") from exc
        handle = _Handle(fd)
        closed = False
        try:
            intake = Intake(self.name, name, size, sha256)
            async for chunk in data:
                written = intake.received
                intake.count(chunk)
                try:
                    await handle.call(_hash_and_write, fd, chunk, written, intake.digest)
                except OSError as exc:
                    raise self._error(name, exc, "write") from exc
            intake.check()
            try:
                await handle.call(os.fsync, fd)
            except OSError as exc:
                raise self._error(name, exc, "fsync") from exc
            closed = True
            handle.close()
            outcome = await self._publish(name, temp, final, replacing)
            if outcome is None:  # another put created it first: compare with theirs
                return await settle_taken(self, await self._lookup(name), name, size, sha256)
            info = await self.stat(name)
            return PutResult(
                outcome=outcome,
                info=info,
                verified_by="SHA-256 of the bytes written, checked before the link; fsynced",
            )
        finally:
            if closed:
                _unlink_quietly(temp)
            else:
                handle.close(then=lambda: _unlink_quietly(temp))

    async def _publish(
        self, name: str, temp: Path, final: Path, replace: bool
    ) -> PutOutcome | None:
        """Give ``temp`` its final name (link, or rename when replacing); fsync the directory.

        Returns None when the name was taken in the meantime (the link failed with EEXIST).
        """

        def publish() -> PutOutcome | None:
            if replace:
                os.replace(temp, final)
                outcome: PutOutcome = "replaced"
            else:
                try:
                    os.link(temp, final, follow_symlinks=False)
                except FileExistsError:
                    return None
                outcome = "created"
            _fsync_dir(final.parent)
            return outcome

        try:
            return await asyncio.wrap_future(_io().submit(publish))
        except OSError as exc:
            raise self._error(name, exc, "link to the final name") from exc

    def _make_parents(self, directory: Path) -> None:
        """Create ``directory`` and missing parents under the root, fsyncing each new entry."""
        missing = []
        while directory != self.root and not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for path in reversed(missing):
            with contextlib.suppress(FileExistsError):
                path.mkdir()
            _fsync_dir(path.parent)

    async def remove_leftovers(self, older_than_s: float) -> list[str]:
        def sweep() -> list[str]:
            removed = []
            cutoff = time.time() - older_than_s
            for directory, dirs, files in os.walk(self.root):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for file in files:
                    path = Path(directory) / file
                    if not _TEMP_NAME.fullmatch(file):
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        st = path.lstat()
                        if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                            path.unlink()
                            removed.append(str(path.relative_to(self.root)))
            return removed

        try:
            return await asyncio.wrap_future(_io().submit(sweep))
        except OSError as exc:
            raise self._error("", exc, "remove leftovers") from exc


class _LocalRange:
    """:class:`~gateway.storage.base.RangeReader` over an open file: ``[position, end)``."""

    __slots__ = ("_end", "_fd", "_name", "_position", "_storage", "location", "read_blocking")

    def __init__(self, storage: LocalStorage, name: str, fd: int, offset: int, end: int) -> None:
        self._storage = storage
        self._name = name
        self._fd = fd
        self._position = offset
        self._end = end
        self.location = str(storage.root / name)
        self.read_blocking: Callable[[int], bytes] | None = self._read

    async def read(self, size: int) -> bytes:
        return self._read(size)

    def _read(self, size: int) -> bytes:
        size = min(size, self._end - self._position)
        if self._fd < 0 or size <= 0:
            return b""
        try:
            data = os.pread(self._fd, size, self._position)
        except OSError as exc:
            raise self._storage._error(self._name, exc, f"read at {self._position}") from exc
        if not data:
            raise RangeNotSatisfiable(
                self._storage.name, self._name, f"ended at {self._position}, before {self._end}"
            )
        self._position += len(data)
        return data

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _walk(root: Path, start: Path, prefix: str) -> Generator[ObjectInfo, None, None]:
    """Regular files under ``start`` whose name (relative to root) starts with ``prefix``.

    Hidden entries (temporary files) and symbolic links are skipped.
    """
    stack = [start]
    while stack:
        directory = stack.pop()
        try:
            entries = os.scandir(directory)
        except FileNotFoundError:
            continue
        with entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                relative = os.path.relpath(entry.path, root)
                if entry.is_dir(follow_symlinks=False):
                    if (relative + "/").startswith(prefix) or prefix.startswith(relative + "/"):
                        stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False) and relative.startswith(prefix):
                    st = entry.stat(follow_symlinks=False)
                    yield ObjectInfo(name=relative, size=st.st_size, mtime=st.st_mtime)


def _next_batch(walker: Generator[ObjectInfo, None, None], size: int) -> list[ObjectInfo]:
    batch = []
    for info in walker:
        batch.append(info)
        if len(batch) >= size:
            break
    return batch
