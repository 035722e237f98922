"""Building and compacting ZipNum clusters (gateway.index.zipnum_build, zipnum_publish).

The clusters are read back with the gateway's own reader
(:class:`~gateway.sources.zipnum.ZipNumSource`) and by decompressing every
shard; pywb reading them is in ``tests/e2e/test_zipnum_cluster.py``.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from gateway.cdx.query import CaptureQuery
from gateway.index.zipnum_build import BuildSettings, InputError
from gateway.index.zipnum_publish import build_cluster, compact_cluster
from gateway.sources.zipnum import ZipNumSource, ZipNumSourceConfig
from tests.sources.conftest import collect

SETTINGS = BuildSettings(lines_per_block=5, shard_bytes=400, fsync=False)


def cdxj_line(host: int, path: int, ts: int) -> bytes:
    url = f"http://host{host:04d}.example/p{path}"
    return (
        f'com,example,host{host:04d})/p{path} 2020{ts:010d} {{"url": "{url}", '
        f'"mime": "text/html", "status": "200", "filename": "a.warc.gz", '
        f'"offset": "{ts}", "length": "100"}}'
    ).encode()


def shard_lines(cluster: Path) -> list[bytes]:
    """Every line of every block, in summary order (decompressed from the shards)."""
    locations = dict(
        line.split("\t", 1) for line in (cluster / "cluster.loc").read_text().splitlines()
    )
    lines: list[bytes] = []
    for entry in (cluster / "cluster.idx").read_text().splitlines():
        _, part, offset, length, _ = entry.split("\t")
        data = (cluster / locations[part]).read_bytes()[int(offset) : int(offset) + int(length)]
        lines += gzip.decompress(data).splitlines()
    return lines


def test_a_build_cuts_sorted_lines_into_blocks_shards_and_a_summary(tmp_path: Path) -> None:
    lines = [cdxj_line(h, p, t) for h in range(4) for p in range(3) for t in range(4)]
    shuffled = lines[:]
    random.Random(7).shuffle(shuffled)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.cdxj").write_bytes(b"\n".join(shuffled[:20]) + b"\n")
    (tmp_path / "in" / "b.cdxj.gz").write_bytes(gzip.compress(b"\n".join(shuffled[20:]) + b"\n"))
    (tmp_path / "dupes.cdxj").write_bytes(b" CDX N b a\n" + b"\n".join(lines[:3]) + b"\n\n")
    report = build_cluster([tmp_path / "in", tmp_path / "dupes.cdxj"], tmp_path / "out", SETTINGS)
    out = tmp_path / "out"
    assert (report.lines, report.blocks) == (48, 10)
    assert shard_lines(out) == sorted(lines)
    summary = (out / "cluster.idx").read_text().splitlines()
    assert [s.split("\t")[4] for s in summary] == [str(n) for n in range(1, 11)]
    assert summary[0].split("\t")[0] == " ".join(lines[0].decode().split(" ")[:2])
    assert report.shards == len({s.split("\t")[1] for s in summary}) > 1
    names = sorted(p.name for p in out.iterdir())
    assert names == [".lock", "cluster.idx", "cluster.loc", report.generation]


def test_unsorted_input_larger_than_a_run_is_merged_from_temporary_runs(tmp_path: Path) -> None:
    lines = [cdxj_line(h, p, 1) for h in range(400) for p in range(40)]  # ~3.5 MB
    shuffled = lines[:]
    random.Random(1).shuffle(shuffled)
    (tmp_path / "big.cdxj").write_bytes(b"\n".join(shuffled) + b"\n")
    settings = BuildSettings(lines_per_block=3000, run_bytes=1 << 20, fsync=False)
    report = build_cluster([tmp_path / "big.cdxj"], tmp_path / "out", settings)
    assert report.lines == len(lines)
    assert shard_lines(tmp_path / "out") == sorted(lines)
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]


def test_a_line_that_is_not_cdx_names_its_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.cdxj").write_bytes(cdxj_line(1, 1, 1) + b"\nnot a line\n")
    with pytest.raises(InputError, match=r"bad.cdxj:2: 'not a line' is not a CDXJ or CDX line"):
        build_cluster([tmp_path / "bad.cdxj"], tmp_path / "out", SETTINGS)
    with pytest.raises(InputError, match="no such file or directory"):
        build_cluster([tmp_path / "missing.cdxj"], tmp_path / "out", SETTINGS)
    assert not (tmp_path / "out" / "cluster.idx").exists()
    assert [p.name for p in (tmp_path / "out").iterdir()] == [".lock"]


async def test_compact_merges_a_tail_and_keeps_the_previous_generation_for_readers(
    tmp_path: Path,
) -> None:
    first = [cdxj_line(h, 1, 1) for h in range(0, 40, 2)]
    tail = [cdxj_line(h, 1, 2) for h in range(1, 40, 2)] + first[:3]
    (tmp_path / "first.cdxj").write_bytes(b"\n".join(first) + b"\n")
    (tmp_path / "tail.cdxj").write_bytes(b"\n".join(tail) + b"\n")
    out = tmp_path / "out"
    one = build_cluster([tmp_path / "first.cdxj"], out, SETTINGS)
    # stat_interval_s=0: the switch is seen by the next lookup, not within a second
    config = ZipNumSourceConfig(path=str(out / "cluster.idx"), stat_interval_s=0)
    source = ZipNumSource(config, name="z")
    everything = CaptureQuery.for_url("example.com", match_type="domain")
    assert len(await collect(source, everything)) == 20
    two = compact_cluster([tmp_path / "tail.cdxj"], out, SETTINGS)
    assert two.lines == 40
    assert shard_lines(out) == sorted(set(first + tail))
    assert len(await collect(source, everything)) == 40
    # The location file still names the first generation's shards, for readers in flight.
    loc = (out / "cluster.loc").read_text()
    assert one.generation in loc
    assert two.generation in loc
    assert (out / one.generation).is_dir()
    # A third generation drops the first.
    three = compact_cluster([tmp_path / "tail.cdxj"], out, SETTINGS)
    assert not (out / one.generation).exists()
    assert sorted(p.name for p in out.glob("gen-*")) == sorted([two.generation, three.generation])
    assert len(await collect(source, everything)) == 40
    await source.aclose()


def test_compact_needs_a_cluster_and_one_build_at_a_time(tmp_path: Path) -> None:
    import fcntl
    import os

    (tmp_path / "t.cdxj").write_bytes(cdxj_line(1, 1, 1) + b"\n")
    with pytest.raises(InputError, match="no cluster to compact"):
        compact_cluster([tmp_path / "t.cdxj"], tmp_path / "out", SETTINGS)
    (tmp_path / "out").mkdir(exist_ok=True)
    fd = os.open(tmp_path / "out" / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(InputError, match="another 'gateway zipnum build' or 'compact'"):
            build_cluster([tmp_path / "t.cdxj"], tmp_path / "out", SETTINGS)
    finally:
        os.close(fd)


def test_settings_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="lines per block 0"):
        BuildSettings(lines_per_block=0)
    with pytest.raises(ValueError, match=r"cluster name '\.\./x'"):
        BuildSettings(name="../x")
