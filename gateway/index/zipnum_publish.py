"""Writing a ZipNum cluster generation and switching it in atomically: build and compact.

A cluster directory ``DIR`` holds the summary ``NAME.idx``, the location
file ``NAME.loc`` (the two paths a reader is configured with, pywb's and the
gateway's alike) and one directory per *generation*, ``gen-YYYYMMDDhhmmssffffff``,
holding that generation's shards ``NAME-NNNNN.cdx.gz`` (parts
``gen-...-NNNNN``). A build or a compaction makes a new generation and
switches it in without a reader ever seeing half a cluster:

1. the shards are written into ``DIR/.gen-....tmp`` (fsync'd), and the
   summary into ``DIR/.NAME.idx.tmp``; the directory is renamed to
   ``gen-...`` (or, with ``s3``, each shard is uploaded to the bucket and
   the local copy removed);
2. ``NAME.loc`` is replaced (temporary file, fsync, rename, fsync of ``DIR``)
   by the new generation's parts *plus* the parts of the generation being
   replaced, so a reader holding the old summary still finds its shards;
3. ``NAME.idx`` is replaced the same way: from this rename on, readers see
   the new generation;
4. generations that the new location file no longer names (two switches
   old) and leftovers of interrupted builds are removed.

A process killed at any moment (SIGKILL) leaves the previous summary and
location file in place, both naming readable shards; the next build removes
what it left. One build or compaction at a time per directory (``DIR/.lock``,
``flock``; a second one fails at once). Shards on S3 are never removed
(expire old generations with a bucket lifecycle rule).

Compaction (:func:`compact_cluster`) is a build whose inputs are the
current cluster's lines (read block by block from its shards, local or on
S3) and CDXJ files: the growing archive's routine is to serve an
``index_group`` of the cluster and its new CDXJ files, and to compact the
files into the cluster nightly (docs/zipnum.md).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from gateway.index.zipnum_build import (
    BuildSettings,
    ClusterWriter,
    InputError,
    Shard,
    input_files,
    sorted_lines,
)

if TYPE_CHECKING:
    from gateway.progress import Bar
    from gateway.storage.base import Storage

__all__ = ["BuildReport", "S3Target", "build_cluster", "compact_cluster"]

_GEN_PREFIX: Final = "gen-"
_MAX_BLOCK_TEXT: Final = 64 * 1024 * 1024


class ClusterBusy(InputError):
    """Another build or compaction holds the directory's lock."""


@dataclass(frozen=True, slots=True)
class S3Target:
    """Where shards go instead of ``DIR``: a bucket, a key prefix, and the text
    the location file names them with (``s3://BUCKET/PREFIX`` or
    ``s3+http(s)://HOST:PORT/BUCKET/PREFIX``, as given)."""

    bucket: str
    prefix: str
    endpoint: str | None
    location_base: str
    region: str = "us-east-1"


@dataclass(frozen=True, slots=True)
class BuildReport:
    """What a build wrote: the generation, its counts and the summary's path."""

    generation: str
    lines: int
    blocks: int
    shards: int
    summary: Path


def build_cluster(
    inputs: Sequence[Path],
    out_dir: Path,
    settings: BuildSettings,
    *,
    s3: S3Target | None = None,
    include_current: bool = False,
    bar: Bar | None = None,
) -> BuildReport:
    """Build a generation from ``inputs`` (files or directories of CDX(J)) in
    ``out_dir`` and switch it in (module docstring); with ``include_current``
    the current cluster's lines are merged in too (compaction).

    Raises :class:`InputError` for a missing input, a bad line (naming file
    and line), a directory in use by another build, or an unreadable current
    cluster; :class:`OSError` when a file cannot be written;
    :class:`~gateway.storage.errors.StorageError` when an upload fails. On
    every failure the previous cluster stays as it was.
    """
    files = input_files(inputs)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_path = out_dir / f"{settings.name}.idx"
    loc_path = out_dir / f"{settings.name}.loc"
    with ExitStack() as stack:
        _lock(out_dir, stack)
        _remove_leftovers(out_dir, loc_path)
        generation = _new_generation(out_dir)
        tmp_dir = out_dir / f".{generation}.tmp"
        work_dir = out_dir / f".{generation}-work.tmp"
        summary_tmp = out_dir / f".{settings.name}.idx.tmp"
        stack.callback(_discard, tmp_dir, work_dir, summary_tmp)
        tmp_dir.mkdir()
        work_dir.mkdir()
        if bar is not None:  # three passes over the input (zipnum_build.sorted_lines)
            bar.total = 3 * sum(p.stat().st_size for p in files)
            bar.refresh()
        progress = bar.update if bar is not None else None
        lines = sorted_lines(
            files,
            run_bytes=settings.run_bytes,
            workdir=work_dir,
            stack=stack,
            progress=progress,
        )
        if include_current:
            import heapq

            current = _current_lines(summary_path, loc_path, s3=s3, workdir=work_dir)
            lines = _unique(heapq.merge(current, lines))
        with summary_tmp.open("wb") as summary:
            writer = ClusterWriter(tmp_dir, summary, generation, settings)
            for line in lines:
                writer.add(line)
            writer.finish()
            _durable(summary, settings.fsync)
        if s3 is not None:
            locations = _upload(writer.shards, generation, s3)
            shutil.rmtree(tmp_dir)
        else:
            tmp_dir.rename(out_dir / generation)
            locations = [(s.part, f"{generation}/{s.path.name}") for s in writer.shards]
        _sync_dir(out_dir, settings.fsync)
        kept = _current_generation_locations(summary_path, loc_path)
        loc_text = "".join(f"{part}\t{where}\n" for part, where in [*locations, *kept])
        _replace(loc_path, loc_text.encode("utf-8"), settings.fsync)
        summary_tmp.replace(summary_path)
        _sync_dir(out_dir, settings.fsync)
        _remove_leftovers(out_dir, loc_path)
        shards = len(writer.shards)
        return BuildReport(generation, writer.lines, writer.blocks, shards, summary_path)


def compact_cluster(
    tails: Sequence[Path],
    out_dir: Path,
    settings: BuildSettings,
    *,
    s3: S3Target | None = None,
    bar: Bar | None = None,
) -> BuildReport:
    """Merge the CDXJ ``tails`` into the cluster in ``out_dir``: a new generation
    holding both (see :func:`build_cluster`; the same errors)."""
    if not (out_dir / f"{settings.name}.idx").is_file():
        raise InputError(
            f"{out_dir / (settings.name + '.idx')}: no cluster to compact; "
            "build one first with 'gateway zipnum build'"
        )
    return build_cluster(tails, out_dir, settings, s3=s3, include_current=True, bar=bar)


# ------------------------------------------------------------------ the switch
@contextmanager
def _locked(out_dir: Path) -> Iterator[None]:
    fd = os.open(out_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ClusterBusy(
                f"{out_dir}: another 'gateway zipnum build' or 'compact' is running here; "
                "wait for it to finish"
            ) from None
        yield
    finally:
        os.close(fd)


def _lock(out_dir: Path, stack: ExitStack) -> None:
    stack.enter_context(_locked(out_dir))


def _new_generation(out_dir: Path) -> str:
    while True:
        now = time.time()
        stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(now)) + f"{int(now % 1 * 1e6):06d}"
        generation = _GEN_PREFIX + stamp
        if not (out_dir / generation).exists():
            return generation
        time.sleep(0.001)


def _generation_of(part: str) -> str | None:
    """``gen-...`` for a part ``gen-...-NNNNN`` this module wrote, else None."""
    if not part.startswith(_GEN_PREFIX):
        return None
    return part.rsplit("-", 1)[0]


def _read_loc(loc_path: Path) -> list[tuple[str, str]]:
    try:
        text = loc_path.read_text("utf-8")
    except FileNotFoundError:
        return []
    pairs = []
    for line in text.splitlines():
        part, _, where = line.partition("\t")
        if part and where:
            pairs.append((part, where))
    return pairs


def _first_part(summary_path: Path) -> str | None:
    try:
        with summary_path.open("rb") as fh:
            first = fh.readline()
    except FileNotFoundError:
        return None
    fields = first.split(b"\t")
    return fields[1].decode("utf-8") if len(fields) > 2 else None


def _current_generation_locations(summary_path: Path, loc_path: Path) -> list[tuple[str, str]]:
    """The location lines of the cluster now served (kept for readers in flight)."""
    part = _first_part(summary_path)
    if part is None:
        return []
    generation = _generation_of(part)
    pairs = _read_loc(loc_path)
    if generation is None:  # a cluster this module did not write: keep all of it
        return pairs
    return [(p, w) for p, w in pairs if _generation_of(p) == generation]


def _remove_leftovers(out_dir: Path, loc_path: Path) -> None:
    """Remove interrupted builds and the generations the location file no longer names."""
    named = {_generation_of(part) for part, _ in _read_loc(loc_path)}
    for entry in out_dir.iterdir():
        name = entry.name
        if name.startswith("." + _GEN_PREFIX) and name.endswith(".tmp"):
            shutil.rmtree(entry, ignore_errors=True)
        elif name.startswith(".") and name.endswith((".idx.tmp", ".loc.tmp")):
            entry.unlink(missing_ok=True)
        elif name.startswith(_GEN_PREFIX) and entry.is_dir() and name not in named:
            shutil.rmtree(entry, ignore_errors=True)


def _discard(tmp_dir: Path, work_dir: Path, summary_tmp: Path) -> None:
    """Remove the build's scratch files and whatever it left unpublished."""
    shutil.rmtree(tmp_dir, ignore_errors=True)
    shutil.rmtree(work_dir, ignore_errors=True)
    summary_tmp.unlink(missing_ok=True)


def _durable(fh: object, fsync: bool) -> None:
    from typing import BinaryIO, cast

    stream = cast(BinaryIO, fh)
    stream.flush()
    if fsync:
        os.fsync(stream.fileno())


def _replace(path: Path, data: bytes, fsync: bool) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as fh:
        fh.write(data)
        _durable(fh, fsync)
    tmp.replace(path)
    _sync_dir(path.parent, fsync)


def _sync_dir(folder: Path, fsync: bool) -> None:
    if not fsync:
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unique(lines: Iterator[bytes]) -> Iterator[bytes]:
    previous: bytes | None = None
    for line in lines:
        if line != previous:
            yield line
            previous = line


# ------------------------------------------------------------------ S3
def _upload(shards: Sequence[Shard], generation: str, s3: S3Target) -> list[tuple[str, str]]:
    """Upload each shard as ``PREFIX/GEN/FILE``; the location lines naming them."""
    return asyncio.run(_upload_all(shards, generation, s3))


async def _open_storage(s3: S3Target) -> Storage:
    from gateway.storage.s3 import S3Storage
    from gateway.storage.s3_config import S3StorageConfig

    config = S3StorageConfig(
        bucket=s3.bucket, prefix=s3.prefix, endpoint=s3.endpoint, region=s3.region
    )
    return await S3Storage.open("zipnum", config)


async def _upload_all(
    shards: Sequence[Shard], generation: str, s3: S3Target
) -> list[tuple[str, str]]:
    import hashlib

    storage = await _open_storage(s3)
    try:
        locations = []
        for shard in shards:
            name = f"{generation}/{shard.path.name}"
            digest = await asyncio.to_thread(_sha256_file, shard.path, hashlib.sha256)
            await storage.put(name, _chunks(shard.path), size=shard.size, sha256=digest)
            locations.append((shard.part, f"{s3.location_base}{name}"))
        return locations
    finally:
        await storage.close()


def _sha256_file(path: Path, new: Callable[[], object]) -> str:
    from typing import Any

    digest: Any = new()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return str(digest.hexdigest())


async def _chunks(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as fh:
        while chunk := await asyncio.to_thread(fh.read, 1 << 20):
            yield chunk


# ------------------------------------------------------------------ compaction
def _current_lines(
    summary_path: Path, loc_path: Path, *, s3: S3Target | None, workdir: Path
) -> Iterator[bytes]:
    """Every line of the current cluster, in order: its shards read block by
    block (a shard on S3 or HTTP is first fetched whole into ``workdir``)."""
    locations = dict(_read_loc(loc_path))
    base = loc_path.parent
    opened: dict[str, Path] = {}
    with summary_path.open("rb") as summary:  # streamed: a summary may hold millions of lines
        for row in summary:
            if not row.strip():
                continue
            fields = row.rstrip(b"\n").split(b"\t")
            try:
                part, offset, length = fields[1].decode(), int(fields[2]), int(fields[3])
            except (IndexError, ValueError, UnicodeDecodeError) as exc:
                raise InputError(f"{summary_path}: not a ZipNum summary line: {row!r}") from exc
            path = opened.get(part)
            if path is None:
                where = locations.get(part)
                if where is None:
                    raise InputError(f"{loc_path}: part {part!r} of the summary has no location")
                path = opened[part] = _local_copy(where, base, workdir, s3)
            yield from _block_lines(path, offset, length)


def _block_lines(path: Path, offset: int, length: int) -> Iterator[bytes]:
    with path.open("rb") as fh:
        fh.seek(offset)
        member = fh.read(length)
    try:
        text = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(member, _MAX_BLOCK_TEXT)
    except zlib.error as exc:
        raise InputError(f"{path}: block at offset {offset} is not a gzip member") from exc
    return (line for line in text.split(b"\n") if line)


def _local_copy(where: str, base: Path, workdir: Path, s3: S3Target | None) -> Path:
    from gateway.sources.zipnum_remote import is_remote

    if not is_remote(where):
        return base / where
    target = workdir / f".fetched-{len(list(workdir.glob('.fetched-*')))}"
    asyncio.run(_fetch(where, target, s3))
    return target


async def _fetch(where: str, target: Path, s3: S3Target | None) -> None:
    """Copy the shard at ``where`` to ``target``: an object under the target's
    own location (``--s3`` or ``--storage``, as the build wrote it), or any
    other ``s3://`` / ``s3+http(s)://`` location."""
    from gateway.sources.zipnum_remote import parse_s3_location
    from gateway.storage.s3_config import S3StorageConfig

    if s3 is not None and where.startswith(s3.location_base):
        config = S3StorageConfig(bucket=s3.bucket, endpoint=s3.endpoint, region=s3.region)
        key = s3.prefix + where[len(s3.location_base) :]
    else:
        parsed = parse_s3_location(where) if not where.startswith("storage:") else None
        if parsed is None:
            raise InputError(
                f"{where}: only local and S3 shards can be compacted "
                "(a storage: shard with --storage naming its storage)"
            )
        config, key = parsed
    from gateway.storage.s3 import S3Storage

    storage = await S3Storage.open("zipnum", config)
    try:
        with target.open("wb") as fh:
            async for chunk in storage.get_range(key):
                fh.write(chunk)
    finally:
        await storage.close()
