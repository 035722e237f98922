"""Building ZipNum clusters: sorted CDX(J) lines cut into gzip blocks, shards and a summary.

The IA's cluster format, as pywb's ``ZipNumIndexSource`` reads it
(pywb/warcserver/index/zipnum.py; :mod:`gateway.sources.zipnum` here):

- every ``lines_per_block`` lines (default 3,000, the IA's) are one gzip
  member (RFC 1952), a *block*;
- blocks follow each other in *shards*; a new shard starts once the current
  one holds ``shard_bytes`` (compressed bytes, default 1 GiB);
- the *summary* has one line per block, ``urlkey timestamp<TAB>part<TAB>offset
  <TAB>length<TAB>block number`` (the key of the block's first line; block
  numbers count from 1 over the whole cluster);
- the *location file* has ``part<TAB>path`` per shard.

Lines are sorted by their bytes (``urlkey timestamp ...``: the order of
``sort`` with ``LC_ALL=C``, pywb's and the IA's), in bounded memory: each
input that is already sorted is read as a stream; an unsorted one is cut
into runs of at most ``run_bytes`` of lines, each sorted in memory and
written to a temporary file, and every stream and run is merged with
:func:`heapq.merge` (an external merge sort). Peak memory is about
``run_bytes`` plus the interpreter (the lines of one run, their list, and the
merge's one line per run) whatever the input size. A line present in several inputs is written once.

Inputs are CDXJ (``urlkey timestamp {json}``) or 9/11-field CDX files,
plain or gzip-compressed (by their magic bytes), or directories of them
(every file below, hidden ones excepted, in name order). Blank lines and
legacy ``CDX ...`` header lines are skipped; lines are kept as they are
(a cluster may mix CDXJ and CDX lines, as the readers accept both).

:mod:`gateway.index.zipnum_publish` writes the files of a generation with
:class:`ClusterWriter` and switches them in atomically.
"""

from __future__ import annotations

import gzip
import heapq
import os
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

__all__ = [
    "DEFAULT_LINES_PER_BLOCK",
    "BuildSettings",
    "ClusterWriter",
    "InputError",
    "input_files",
    "sorted_lines",
]

#: Lines per gzip block: the IA's and pywb's default cluster.
DEFAULT_LINES_PER_BLOCK: Final = 3000
#: Compressed bytes after which a new shard starts.
DEFAULT_SHARD_BYTES: Final = 1 << 30
#: Bytes of lines sorted in memory at a time (one run of the external sort).
DEFAULT_RUN_BYTES: Final = 256 << 20
#: Lines written to a run file at a time.
_SPILL_LINES: Final = 8192
_CDX_HEADERS: Final = (b" CDX", b"CDX ")
_GZIP_MAGIC: Final = b"\x1f\x8b"

#: Called with the number of input bytes just read (a progress bar's ``update``).
Progress = Callable[[int], object]


class InputError(ValueError):
    """An input that cannot be part of a cluster: unreadable, or a line that is not CDX(J)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildSettings:
    """How a cluster is cut: ``lines_per_block``, ``shard_bytes`` (compressed
    bytes per shard, at least one block each), ``run_bytes`` (memory of one
    sorted run), ``name`` (the summary is ``NAME.idx``, the location file
    ``NAME.loc``), ``compress_level`` (zlib 1-9), ``fsync`` (make every file
    durable before it is switched in). Raises :class:`ValueError` naming the field."""

    lines_per_block: int = DEFAULT_LINES_PER_BLOCK
    shard_bytes: int = DEFAULT_SHARD_BYTES
    run_bytes: int = DEFAULT_RUN_BYTES
    name: str = "cluster"
    compress_level: int = 6
    fsync: bool = True

    def __post_init__(self) -> None:
        if self.lines_per_block < 1:
            raise ValueError(f"lines per block {self.lines_per_block}: expected at least 1")
        if self.shard_bytes < 1:
            raise ValueError(f"shard size {self.shard_bytes}: expected at least 1 byte")
        if self.run_bytes < 1 << 20:
            raise ValueError(f"run size {self.run_bytes}: expected at least 1 MiB")
        if not 1 <= self.compress_level <= 9:
            raise ValueError(f"compress level {self.compress_level}: expected 1 to 9")
        if not self.name or "/" in self.name or self.name.startswith(".") or "\t" in self.name:
            raise ValueError(
                f"cluster name {self.name!r}: expected a file name without '/' or a leading '.'"
            )


def input_files(paths: Sequence[Path]) -> list[Path]:
    """The files named by ``paths``: files as given, directories as every
    non-hidden file below them in name order. Raises :class:`InputError` for
    a path that does not exist."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                files.extend(Path(folder, n) for n in sorted(names) if not n.startswith("."))
        elif path.is_file():
            files.append(path)
        else:
            raise InputError(f"{path}: no such file or directory; expected CDXJ or CDX files")
    return files


def read_index_lines(path: Path, progress: Progress | None = None) -> Iterator[bytes]:
    """The CDX(J) lines of ``path`` without line ends, blank and header lines skipped.

    Raises :class:`InputError` naming the file and line number for a line
    with fewer than three space-separated fields or a timestamp that is not
    1 to 14 digits (pywb's CDXJ and CDX alike start ``urlkey timestamp``).
    """
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with raw, ExitStack() as stack:
        stream: IO[bytes] | gzip.GzipFile = raw
        if raw.read(2) == _GZIP_MAGIC:
            unpacked = gzip.GzipFile(fileobj=raw, mode="rb")
            stack.callback(unpacked.close)
            stream = unpacked
        raw.seek(0)
        counted = 0
        try:
            for number, line in enumerate(stream, 1):
                if progress is not None and number % 4096 == 0:
                    position = raw.tell()
                    progress(position - counted)
                    counted = position
                line = line.rstrip(b"\r\n")
                if not line.strip() or line.startswith(_CDX_HEADERS):
                    continue
                fields = line.split(b" ", 2)
                if len(fields) < 3 or not (0 < len(fields[1]) <= 14 and fields[1].isdigit()):
                    shown = line[:120].decode("utf-8", "replace")
                    raise InputError(
                        f"{path}:{number}: {shown!r} is not a CDXJ or CDX line; "
                        "expected 'urlkey timestamp ...'"
                    )
                yield line
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path}: cannot read: {exc}") from exc
        if progress is not None:
            progress(raw.tell() - counted)


def _is_sorted(path: Path) -> bool:
    previous = b""
    for line in read_index_lines(path):
        if line < previous:
            return False
        previous = line
    return True


def sorted_lines(
    files: Sequence[Path],
    *,
    run_bytes: int,
    workdir: Path,
    stack: ExitStack,
    progress: Progress | None = None,
) -> Iterator[bytes]:
    """Every line of ``files`` in byte order, each distinct line once.

    Sorted files are streamed; unsorted ones are sorted in runs of about
    ``run_bytes`` written under ``workdir`` (removed when ``stack`` closes).
    ``progress`` counts three passes over the input's bytes: every file is
    checked (one pass), an unsorted one is cut into runs (the second pass;
    a sorted one counts it at once), and the merge counts the bytes of the
    lines it yields (the third).
    """
    streams: list[Iterable[bytes]] = []
    for path in files:
        size = path.stat().st_size
        if _is_sorted(path):
            if progress is not None:
                progress(2 * size)
            streams.append(read_index_lines(path))
        else:
            if progress is not None:
                progress(size)
            streams.extend(_runs(path, run_bytes, workdir, stack, progress))
    previous: bytes | None = None
    merged = 0
    for number, line in enumerate(heapq.merge(*streams)):
        if line != previous:
            yield line
            previous = line
        merged += len(line) + 1
        if progress is not None and number % 4096 == 4095:
            progress(merged)
            merged = 0
    if progress is not None:
        progress(merged)


def _runs(
    path: Path, run_bytes: int, workdir: Path, stack: ExitStack, progress: Progress | None
) -> list[Iterator[bytes]]:
    """Sorted runs of ``path``'s lines, each in a temporary file read back as a stream."""
    runs: list[Iterator[bytes]] = []
    batch: list[bytes] = []
    held = 0
    for line in read_index_lines(path, progress):
        batch.append(line)
        held += len(line) + 64  # the bytes object and its list slot
        if held >= run_bytes:
            runs.append(_spill(batch, workdir, stack))
            batch, held = [], 0
    if batch:
        runs.append(_spill(batch, workdir, stack))
    return runs


def _spill(batch: list[bytes], workdir: Path, stack: ExitStack) -> Iterator[bytes]:
    batch.sort()
    run = tempfile.TemporaryFile(dir=workdir, prefix=".run-")  # noqa: SIM115 (closed by stack)
    stack.callback(run.close)
    for start in range(0, len(batch), _SPILL_LINES):  # never a second copy of the run
        run.write(b"\n".join(batch[start : start + _SPILL_LINES]) + b"\n")
    batch.clear()
    run.seek(0)
    return (line.rstrip(b"\n") for line in run)


@dataclass(frozen=True, slots=True)
class Shard:
    """A written shard: its part name, file and size in bytes."""

    part: str
    path: Path
    size: int


class ClusterWriter:
    """Writes sorted lines as blocks and shards under ``folder`` and the summary to ``summary``.

    Parts are named ``{part_prefix}-NNNNN`` and their files
    ``folder/{name}-NNNNN.cdx.gz``. Call :meth:`add` for each line in order,
    then :meth:`finish`; :attr:`shards` lists what was written.
    """

    def __init__(
        self, folder: Path, summary: IO[bytes], part_prefix: str, settings: BuildSettings
    ) -> None:
        self.folder = folder
        self.settings = settings
        self.part_prefix = part_prefix
        self.shards: list[Shard] = []
        self.lines = 0
        self.blocks = 0
        self._summary = summary
        self._block: list[bytes] = []
        self._shard: IO[bytes] | None = None
        self._offset = 0
        self._last = b""

    def add(self, line: bytes) -> None:
        """One more line; raises :class:`InputError` when it sorts before the last one."""
        if line < self._last:
            raise InputError("lines out of order while writing blocks (a bug of the sort)")
        self._last = line
        self._block.append(line)
        self.lines += 1
        if len(self._block) >= self.settings.lines_per_block:
            self._write_block()

    def finish(self) -> None:
        """Write the last block and close the last shard (fsync'd when the settings say so)."""
        if self._block:
            self._write_block()
        self._close_shard()

    def _write_block(self) -> None:
        if self._shard is None:
            number = len(self.shards)
            path = self.folder / f"{self.settings.name}-{number:05d}.cdx.gz"
            self._shard = path.open("xb")
            self.shards.append(Shard(f"{self.part_prefix}-{number:05d}", path, 0))
            self._offset = 0
        packer = zlib.compressobj(self.settings.compress_level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        member = packer.compress(b"\n".join(self._block) + b"\n") + packer.flush()
        self._shard.write(member)
        self.blocks += 1
        key = b" ".join(self._block[0].split(b" ", 2)[:2])
        part = self.shards[-1].part.encode("utf-8")
        self._summary.write(
            b"%s\t%s\t%d\t%d\t%d\n" % (key, part, self._offset, len(member), self.blocks)
        )
        self._offset += len(member)
        self._block = []
        if self._offset >= self.settings.shard_bytes:
            self._close_shard()

    def _close_shard(self) -> None:
        if self._shard is None:
            return
        if self.settings.fsync:
            self._shard.flush()
            os.fsync(self._shard.fileno())
        self._shard.close()
        self._shard = None
        last = self.shards[-1]
        self.shards[-1] = Shard(last.part, last.path, self._offset)
