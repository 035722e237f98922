"""The store's own copy of each file (``primary``), as replication sees it.

:class:`PrimaryStorage` reads the store's WARC files through the
:class:`~gateway.storage.base.Storage` protocol, so that the copier takes
the primary as the source of a copy like any other storage. The place of a
file is derived from its row (:meth:`Layout.place
<gateway.store.layout.Layout.place>`), never listed. The archiver never
writes the primary through ``put``: the one write it makes there is
:func:`restore_primary`, when the store's own copy of a file it wrote is lost
or damaged and a replica holds the file's bytes (issue 13 §4):

1. the replica is read into a temporary file in ``incoming/`` (a hidden
   name, created exclusively and ``flock``-ed: a store opening meanwhile
   leaves it alone, and the next open removes one whose restorer died),
   every byte hashed and every gzip member inflated as it is written;
2. the SHA-256 and size are checked against the file's row, the file is
   fsynced;
3. a damaged file still at the final name is moved to
   ``invalid/YYYYMMDD/`` (kept, never deleted), and the temporary file is
   hard-linked to the final name (``link(2)``: never over a file that
   appeared meanwhile), the directories fsynced, the temporary name removed.

So the final name only ever holds the file's verified bytes or nothing, and
nothing the store wrote is deleted. A file the store did not write
(``origin`` ``found``) is never restored: it is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from pathlib import Path
from typing import Final

from gateway.storage.base import ObjectInfo, PutResult, RangeReader, Storage
from gateway.storage.copier import CopyOutcome, CopyResult
from gateway.storage.errors import (
    CorruptObject,
    ObjectNotFound,
    RangeNotSatisfiable,
    StorageError,
    StorageRefused,
)
from gateway.storage.integrity import SourceCheck, check_for
from gateway.storage.local import LocalStorage, LocalStorageConfig
from gateway.storage.settings import PRIMARY
from gateway.store.layout import Layout, Placed, fsync_dir
from gateway.store.recovery import file_sha256

__all__ = ["RESTORE_PREFIX", "PrimaryStorage", "restore_primary"]

#: Temporary names of restores in ``incoming/``: ``.restore.{name}.{32 hex}``.
RESTORE_PREFIX: Final = ".restore."


class PrimaryStorage:
    """The store's ``warcs/`` as a read-only storage named ``primary``.

    ``row(name)`` gives the file's row (name, ``fs_version``, date), which
    places it (:meth:`Layout.place <gateway.store.layout.Layout.place>`);
    a name without a row is looked for in ``warcs/`` itself. Reads are a
    :class:`~gateway.storage.local.LocalStorage`'s over the ``warcs/``
    directory, with the file's path relative to it as the object name.
    """

    name = PRIMARY
    page_size = 1000

    def __init__(self, layout: Layout, row: Callable[[str], Placed | None] | None = None) -> None:
        self.layout = layout
        self._row = row or (lambda _: None)
        self._files = LocalStorage(PRIMARY, LocalStorageConfig(path=str(layout.warcs)))

    def path(self, name: str) -> Path:
        """Where file ``name`` lives (from its row; ``warcs/name`` without one).

        Raises :class:`~gateway.store.errors.StoreError` for a row of a layout
        this release does not know.
        """
        row = self._row(name)
        return self.layout.warcs / name if row is None else self.layout.place(row)

    def _relative(self, name: str) -> str:
        return self.path(name).relative_to(self.layout.warcs).as_posix()

    def get_range(
        self, name: str, offset: int = 0, length: int | None = None
    ) -> AsyncGenerator[bytes, None]:
        return self._files.get_range(self._relative(name), offset, length)

    async def open_range(self, name: str, offset: int, length: int | None = None) -> RangeReader:
        return await self._files.open_range(self._relative(name), offset, length)

    async def stat(self, name: str) -> ObjectInfo:
        info = await self._files.stat(self._relative(name))
        return ObjectInfo(name=name, size=info.size, mtime=info.mtime)

    async def digest(self, name: str) -> str:
        return await self._files.digest(self._relative(name))

    def iter(self, prefix: str = "") -> AsyncGenerator[ObjectInfo, None]:
        return self._files.iter(prefix)

    async def put(self, name: str, data: AsyncIterable[bytes], **_: object) -> PutResult:
        """Refused: the archiver restores the primary (:func:`restore_primary`), never puts."""
        raise StorageRefused(
            PRIMARY, name, "the store's own copy is written by the store; a copy to it is a restore"
        )

    async def remove_leftovers(self, older_than_s: float) -> list[str]:
        return []  # a store's open removes what restores left in incoming/

    def describe(self) -> str:
        return f"the store's own copy in {self.layout.warcs}/"

    async def close(self) -> None:
        return None


def _lock_new(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def restore_primary(
    layout: Layout,
    file: Placed,
    *,
    sha256: str,
    source: Storage,
) -> CopyResult:
    """Restore the store's copy of ``file`` (SHA-256 ``sha256``) from ``source``, at its
    row's place (:meth:`Layout.place <gateway.store.layout.Layout.place>`).

    See the module docstring for the steps. Returns the outcome as a
    :class:`~gateway.storage.copier.CopyResult` with ``destination``
    ``primary``: ``copied`` (restored), ``already_present`` (the file at its
    place has the bytes after all: nothing changed), ``source_missing``,
    ``source_corrupt`` (the replica's bytes are not the file's),
    ``source_failed`` / ``retry`` (reading the replica failed; lasting or
    transient), ``failed`` (the store's disk refused: no space, no
    permission). Never raises a storage error or an :class:`OSError`;
    cancellation propagates, leaving at most the temporary file.
    """
    started = time.monotonic()
    name = file.name
    final = layout.place(file)

    def result(outcome: CopyOutcome, detail: str = "", size: int = 0) -> CopyResult:
        return CopyResult(
            name=name,
            source=source.name,
            destination=PRIMARY,
            outcome=outcome,
            size=size,
            sha256=sha256,
            detail=detail,
            verified_by="SHA-256 of the bytes written, checked before the link; fsynced"
            if outcome == "copied"
            else "",
            elapsed_s=time.monotonic() - started,
        )

    layout.incoming.mkdir(exist_ok=True)
    temp = layout.incoming / f"{RESTORE_PREFIX}{name}.{secrets.token_hex(16)}"
    try:
        fd = await asyncio.to_thread(_lock_new, temp)
    except OSError as exc:
        return result("failed", f"cannot create {temp}: {exc.strerror or exc}")
    digest = hashlib.sha256()
    check = check_for(source.name, name)
    size = 0
    try:
        stream = source.get_range(name)
        try:
            async for chunk in stream:
                size += len(chunk)
                await asyncio.to_thread(_hash_write_check, fd, chunk, digest, check)
            if check is not None:
                check.finish()
        finally:
            await stream.aclose()
        if digest.hexdigest() != sha256:
            return result(
                "source_corrupt",
                f"{size} bytes with sha256 {digest.hexdigest()}, not the file's {sha256}",
                size,
            )
        outcome = await asyncio.to_thread(_publish, layout, fd, temp, final, sha256)
        return result(outcome, "" if outcome == "copied" else "the file was whole", size)
    except ObjectNotFound as exc:
        return result("source_missing", str(exc))
    except (CorruptObject, RangeNotSatisfiable) as exc:
        return result("source_corrupt", exc.problem, size)
    except StorageError as exc:
        return result("retry" if exc.retryable else "source_failed", str(exc), size)
    except OSError as exc:
        lasting = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS)
        return result("failed" if lasting else "retry", f"{final}: {exc.strerror or exc}", size)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        os.close(fd)


def _hash_write_check(
    fd: int, chunk: bytes, digest: hashlib._Hash, check: SourceCheck | None
) -> None:
    digest.update(chunk)
    _write_all(fd, chunk)
    if check is not None:
        check.feed(chunk)


def _publish(layout: Layout, fd: int, temp: Path, final: Path, sha256: str) -> CopyOutcome:
    """fsync the verified temporary file and give it the final name (blocking)."""
    os.fsync(fd)
    if final.exists():
        if file_sha256(final) == sha256:
            return "already_present"
        layout.move_to_invalid(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(temp, final)
    except FileExistsError:  # it appeared meanwhile: another process restored it
        if file_sha256(final) == sha256:
            return "already_present"
        raise OSError(errno.EEXIST, "appeared during the restore with other bytes") from None
    fsync_dir(final.parent)
    return "copied"
