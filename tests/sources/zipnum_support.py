"""Writing ZipNum clusters for tests: sorted lines cut into gzip blocks and shards."""

from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path


def write_zipnum(
    lines: Sequence[bytes],
    folder: Path,
    name: str = "cluster",
    *,
    lines_per_block: int = 7,
    blocks_per_shard: int = 4,
) -> Path:
    """Write ``lines`` (sorted) as ``name.idx``, ``name.loc`` and shards ``name-NN.cdx.gz``.

    Each block is one gzip member of ``lines_per_block`` lines; a shard holds
    ``blocks_per_shard`` blocks. Returns the summary's path.
    """
    summary: list[str] = []
    locations: list[str] = []
    blocks = [lines[i : i + lines_per_block] for i in range(0, len(lines), lines_per_block)]
    for shard_number, first in enumerate(range(0, len(blocks), blocks_per_shard)):
        part = f"{name}-{shard_number:02d}"
        offset = 0
        with (folder / f"{part}.cdx.gz").open("wb") as shard:
            for block in blocks[first : first + blocks_per_shard]:
                member = gzip.compress(b"".join(line + b"\n" for line in block), mtime=0)
                shard.write(member)
                key = b" ".join(block[0].split(b" ", 2)[:2]).decode("utf-8")
                summary.append(f"{key}\t{part}\t{offset}\t{len(member)}\t{len(summary) + 1}")
                offset += len(member)
        locations.append(f"{part}\t{part}.cdx.gz")
    (folder / f"{name}.idx").write_text("".join(line + "\n" for line in summary), "utf-8")
    (folder / f"{name}.loc").write_text("".join(line + "\n" for line in locations), "utf-8")
    return folder / f"{name}.idx"
