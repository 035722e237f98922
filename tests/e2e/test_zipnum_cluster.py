"""ZipNum clusters as docs/zipnum.md runs them: ``gateway zipnum build`` and ``compact``
in a temporary directory with relative paths, served by ``gateway serve`` and by
pywb 2.10's own ZipNum reader, and SIGKILL at random moments of a build or a compaction.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import PYWB_BIN, _http_get, _start_until_ready
from tests.e2e.support import GATEWAY, gateway, get, serve, until
from tests.storage.seaweedfs import SeaweedFS, run_in_thread

#: The docs' nightly routine, as written in docs/zipnum.md.
GROUP_CONFIG = """\
collections:
  web:
    index_group:
      cluster: cluster/cluster.idx
      tail: tail/
"""


def _copy_sample(sample_dir: Path, folder: Path, *names: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(sample_dir / "cdxj" / name, folder / name)


def _index(port: int, coll: str, url: str, match: str = "exact") -> list[str]:
    """The CDXJ lines the gateway answers (``urlkey timestamp`` of each)."""
    status, _, body = get(port, f"/{coll}/index?url={quote(url)}&matchType={match}")
    assert status in (200, 404), body
    return [" ".join(line.split(" ", 2)[:2]) for line in body.decode().splitlines() if line]


def test_build_serve_and_the_nightly_compaction_with_relative_paths(
    tmp_path: Path, sample_dir: Path
) -> None:
    _copy_sample(sample_dir, tmp_path / "indexes", "iana.cdxj")
    _copy_sample(sample_dir, tmp_path / "tail", "example.cdxj")
    built = gateway(["zipnum", "build", "indexes/", "-o", "cluster"], tmp_path)
    assert built.returncode == 0, built.stderr
    assert "171 lines in 1 blocks" in built.stderr
    (tmp_path / "collections.yaml").write_text(GROUP_CONFIG)
    server, port = serve(tmp_path)
    try:
        queries = [("iana.org", "domain"), ("example.com", "prefix")]
        before = {url: _index(port, "web", url, match) for url, match in queries}
        iana_lines = [
            line
            for name in ("indexes/iana.cdxj", "tail/example.cdxj")
            for line in (tmp_path / name).read_text().splitlines()
            if line.startswith("org,iana)")
        ]
        assert len(before["iana.org"]) == len(iana_lines) > 171  # the tail holds one too
        assert before["example.com"]  # from the tail
        compacted = gateway(["zipnum", "compact", "tail/", "-o", "cluster"], tmp_path)
        assert compacted.returncode == 0, compacted.stderr
        for name in os.listdir(tmp_path / "tail"):
            (tmp_path / "tail" / name).unlink()  # the tail is now in the cluster
        # The directory source sees the tail gone within its stat_interval_s (1 s);
        # until then the tail's captures are listed twice (docs/zipnum.md).
        until(
            "the group answers as before the compaction",
            lambda: {url: _index(port, "web", url, match) for url, match in queries} == before,
        )
    finally:
        server.stop()


def test_bad_input_exits_1_and_leaves_the_cluster_as_it_was(
    tmp_path: Path, sample_dir: Path
) -> None:
    _copy_sample(sample_dir, tmp_path / "indexes", "iana.cdxj")
    assert gateway(["zipnum", "build", "indexes/", "-o", "cluster"], tmp_path).returncode == 0
    summary = (tmp_path / "cluster" / "cluster.idx").read_bytes()
    (tmp_path / "bad.cdxj").write_text("com,example)/ 2020 {}\nnot a cdx line\n")
    failed = gateway(["zipnum", "compact", "bad.cdxj", "-o", "cluster"], tmp_path)
    assert failed.returncode == 1
    assert "bad.cdxj:2: 'not a cdx line' is not a CDXJ or CDX line" in failed.stderr
    assert "the previous cluster is unchanged" in failed.stderr
    assert (tmp_path / "cluster" / "cluster.idx").read_bytes() == summary
    usage = gateway(["zipnum", "build", "x", "-o", "c", "--shard-size", "lots"], tmp_path)
    assert usage.returncode == 2
    assert "'lots' is not a size" in usage.stderr


# ------------------------------------------------------------------ pywb serves it
def _pywb_ready(port: int) -> bool:
    answer = _http_get(port, "/")
    return answer is not None and answer[0] == 200 and b"/zip" in answer[1]


@pytest.fixture
def pywb_on_cluster(tmp_path: Path, sample_dir: Path) -> Iterator[tuple[int, Path]]:
    """pywb's warcserver serving a cluster ``gateway zipnum build`` wrote (collection ``zip``)."""
    binary = PYWB_BIN / "warcserver"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"pywb is not installed: {binary} is missing; run scripts/install-peers")
    _copy_sample(sample_dir, tmp_path / "indexes", "iana.cdxj", "example.cdxj")
    options = ["--lines-per-block", "25", "--shard-size", "2K"]  # 7 blocks, 3 shards
    built = gateway(["zipnum", "build", "indexes/", "-o", "cluster", *options], tmp_path)
    assert built.returncode == 0, built.stderr
    summary = tmp_path / "cluster" / "cluster.idx"
    config = {"collections": {"zip": {"index": str(summary)}}}
    workdir = tmp_path / "pywb"
    workdir.mkdir()
    (workdir / "config.yaml").write_text(json.dumps(config))
    env = {**os.environ, "PYWB_CONFIG_FILE": str(workdir / "config.yaml")}

    def argv(port: int) -> list[str]:
        return [str(binary), "-b", "127.0.0.1", "-p", str(port)]

    server, port = _start_until_ready("pywb-zipnum", argv, workdir, _pywb_ready, env)
    try:
        yield port, summary
    finally:
        server.stop()


def test_pywb_serves_the_gateway_built_cluster_with_the_gateway_s_answers(
    tmp_path: Path, pywb_on_cluster: tuple[int, Path]
) -> None:
    pywb_port, summary = pywb_on_cluster
    # More than one block, and at most pywb's max_blocks (10): every answer is whole in pywb.
    assert 1 < len(summary.read_text().splitlines()) <= 10
    (tmp_path / "collections.yaml").write_text(
        "collections:\n  zip:\n    index: cluster/cluster.idx\n"
    )
    server, port = serve(tmp_path)
    try:
        queries = [
            ("http://www.iana.org/", "exact"),
            ("http://www.iana.org/_css/2013.1/print.css", "exact"),
            ("http://example.com/", "exact"),
            ("iana.org/_img/", "prefix"),
            ("example.com", "host"),
            ("iana.org", "domain"),
            ("http://example.net/absent", "exact"),
        ]
        for url, match in queries:
            path = f"/zip/index?url={quote(url)}&matchType={match}&output=json"
            pywb = [json.loads(line) for line in _get_lines(pywb_port, path)]
            ours = [json.loads(line) for line in _get_lines(port, path)]
            assert [(r["urlkey"], r["timestamp"], r["url"], r.get("digest")) for r in ours] == [
                (r["urlkey"], r["timestamp"], r["url"], r.get("digest")) for r in pywb
            ], (url, match)
            assert len(ours) == len(pywb)
        domain = "/zip/index?url=iana.org&matchType=domain"
        assert len(_get_lines(port, domain)) == 172  # 171 from iana.cdxj, one from example.cdxj
    finally:
        server.stop()


def _get_lines(port: int, path: str) -> list[str]:
    answer = _http_get(port, path)
    assert answer is not None, path
    status, body = answer
    assert status in (200, 404), (path, status, body[:300])
    return [line for line in body.decode().splitlines() if line and status == 200]


# ------------------------------------------------------------------ SIGKILL
def _lines(hosts: range, paths: int, stamp: int) -> list[bytes]:
    return [
        f'com,example,host{h:04d})/p{p} 2020{stamp:010d} {{"url": '
        f'"http://host{h:04d}.example.com/p{p}", "status": "200"}}'.encode()
        for h in hosts
        for p in range(paths)
    ]


def _cluster_lines(cluster: Path) -> frozenset[bytes]:
    """Every line the cluster's summary names, read through its location file;
    fails when a part is missing or a block is not whole."""
    locations = {}
    for row in (cluster / "cluster.loc").read_text().splitlines():
        part, where = row.split("\t")
        locations[part] = cluster / where
    lines: set[bytes] = set()
    for entry in (cluster / "cluster.idx").read_text().splitlines():
        _, part, offset, length, _ = entry.split("\t")
        with locations[part].open("rb") as shard:
            shard.seek(int(offset))
            lines.update(gzip.decompress(shard.read(int(length))).splitlines())
    return frozenset(lines)


def test_sigkill_during_build_or_compact_leaves_the_previous_cluster_serving(
    tmp_path: Path,
) -> None:
    a = _lines(range(60), 300, 1)
    b = _lines(range(30), 300, 2) + a
    tail = _lines(range(60, 70), 300, 1)
    random.Random(5).shuffle(b)  # unsorted: the build spills sorted runs
    for name, lines in (("a.cdxj", a), ("b.cdxj", b), ("tail.cdxj", tail)):
        (tmp_path / name).write_bytes(b"\n".join(lines) + b"\n")
    options = ["--lines-per-block", "200", "--shard-size", "64K", "--memory", "1M"]
    started = time.monotonic()
    first = gateway(["zipnum", "build", "a.cdxj", "-o", "cluster", *options], tmp_path)
    assert first.returncode == 0, first.stderr
    window_s = max(0.2, (time.monotonic() - started) * 1.5)  # a whole command, and then some
    current = frozenset(a)
    (tmp_path / "collections.yaml").write_text("collections:\n  web: cluster/cluster.idx\n")
    server, port = serve(tmp_path)
    rng = random.Random(24)
    outcomes = {"old": 0, "new": 0}
    try:
        for _ in range(12):
            command, inputs = rng.choice(
                [("build", "a.cdxj"), ("build", "b.cdxj"), ("compact", "tail.cdxj")]
            )
            source = {"a.cdxj": a, "b.cdxj": b, "tail.cdxj": tail}[inputs]
            after = frozenset(source) | (current if command == "compact" else frozenset())
            process = subprocess.Popen(
                [GATEWAY, "zipnum", command, inputs, "-o", "cluster", *options],
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(rng.uniform(0, window_s))
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
            seen = _cluster_lines(tmp_path / "cluster")
            assert seen in (current, after), "a cluster that is neither the old nor the new one"
            outcomes["old" if seen == current and seen != after else "new"] += 1
            current = seen
            expected = sorted(
                " ".join(row.decode().split(" ", 2)[:2])
                for row in current
                if row.startswith(b"com,example,host0001)/")
            )
            # a switched cluster is seen within stat_interval_s (1 s by default)
            deadline = time.monotonic() + 30
            served = _index(port, "web", "host0001.example.com/", "prefix")
            while served != expected and time.monotonic() < deadline:
                time.sleep(0.1)
                served = _index(port, "web", "host0001.example.com/", "prefix")
            assert served == expected
        finished = gateway(["zipnum", "compact", "tail.cdxj", "-o", "cluster", *options], tmp_path)
        assert finished.returncode == 0, finished.stderr
        assert _cluster_lines(tmp_path / "cluster") == current | frozenset(tail)
        leftovers = [p.name for p in (tmp_path / "cluster").iterdir() if p.name.endswith(".tmp")]
        assert leftovers == []
        assert len(list((tmp_path / "cluster").glob("gen-*"))) <= 2
    finally:
        server.stop()
    print("kills that left the old cluster / switched to the new one:", outcomes)


# ------------------------------------------------------------------ shards on S3
def test_a_cluster_built_onto_s3_answers_as_the_local_one(
    tmp_path: Path, sample_dir: Path, seaweedfs: SeaweedFS
) -> None:
    run_in_thread(seaweedfs.create_bucket("zipnum-e2e"))
    env = {**seaweedfs.environ(), "AWS_ENDPOINT_URL": seaweedfs.endpoint}
    _copy_sample(sample_dir, tmp_path / "indexes", "iana.cdxj")
    _copy_sample(sample_dir, tmp_path / "tail", "example.cdxj")
    options = ["--lines-per-block", "30", "--shard-size", "4K"]
    for out, extra in (("local", []), ("remote", ["--s3", "s3://zipnum-e2e/clusters/main/"])):
        built = gateway(["zipnum", "build", "indexes/", "-o", out, *options, *extra], tmp_path, env)
        assert built.returncode == 0, built.stderr
        compacted = gateway(
            ["zipnum", "compact", "tail/", "-o", out, *options, *extra], tmp_path, env
        )
        assert compacted.returncode == 0, compacted.stderr
    # The same onto a storage of the store, as docs/zipnum.md writes it.
    store = (
        "store:\n  storages:\n    s3: {type: s3, endpoint: "
        f'"{seaweedfs.endpoint}", bucket: zipnum-e2e, prefix: "gateway/"}}\n'
    )
    (tmp_path / "collections.yaml").write_text(store + "collections: {}\n")
    via = ["--storage", "s3", "--config", "collections.yaml"]
    built = gateway(["zipnum", "build", "indexes/", "-o", "viastore", *via], tmp_path, env)
    assert built.returncode == 0, built.stderr
    # Compaction reads the current generation back through the same storage.
    compacted = gateway(["zipnum", "compact", "tail/", "-o", "viastore", *via], tmp_path, env)
    assert compacted.returncode == 0, compacted.stderr
    via_loc = (tmp_path / "viastore" / "cluster.loc").read_text()
    # Named by the storage: its endpoint, bucket and prefix come from the store's config.
    assert "\tstorage:s3/zipnum/cluster/gen-" in via_loc
    assert seaweedfs.endpoint not in via_loc
    wrong = gateway(["zipnum", "build", "indexes/", "-o", "x", "--storage", "nope"], tmp_path, env)
    assert wrong.returncode == 2
    assert "--storage 'nope' is not one of store.storages (s3)" in wrong.stderr
    loc = (tmp_path / "remote" / "cluster.loc").read_text()
    assert "\ts3://zipnum-e2e/clusters/main/gen-" in loc
    assert not list((tmp_path / "remote").glob("gen-*"))  # the shards are on S3 only
    (tmp_path / "collections.yaml").write_text(
        store + "collections:\n  local: local/cluster.idx\n  remote: remote/cluster.idx\n"
        "  viastore: viastore/cluster.idx\n"
    )
    server, port = serve(tmp_path, env=env)
    try:
        for url, match in [
            ("http://www.iana.org/", "exact"),
            ("iana.org", "domain"),
            ("example.com", "prefix"),
            ("http://example.net/", "exact"),
        ]:
            local = _index(port, "local", url, match)
            assert _index(port, "remote", url, match) == local
            assert _index(port, "viastore", url, match) == local
        _, _, metrics = get(port, "/metrics")
        assert b'gateway_zipnum_block_cache_misses_total{collection="remote"' in metrics
        assert b'gateway_zipnum_range_requests_total{collection="remote"' in metrics
    finally:
        server.stop()


# ------------------------------------------------------------------ bounded memory
#: Runs a command and prints its peak RSS (kB): measured by a small parent, since a
#: child forked from this test's large process starts with that process's peak.
_PEAK_RSS = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); "
    "_, status, usage = os.wait4(p.pid, 0); print(usage.ru_maxrss); "
    "sys.exit(os.waitstatus_to_exitcode(status))"
)


def _peak_rss_mb(args: list[str], cwd: Path) -> float:
    """The peak RSS of ``gateway ARGS`` in MiB."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, GATEWAY, *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1]) / 1024


def test_the_sort_holds_one_run_in_memory_not_the_input(tmp_path: Path) -> None:
    big = _lines(range(400), 400, 3)  # 160,000 lines, about 20 MB
    random.Random(3).shuffle(big)
    (tmp_path / "big.cdxj").write_bytes(b"\n".join(big) + b"\n")
    (tmp_path / "small.cdxj").write_bytes(b"\n".join(big[:10]) + b"\n")
    options = ["--memory", "1M", "--no-fsync"]
    baseline = _peak_rss_mb(["zipnum", "build", "small.cdxj", "-o", "small", *options], tmp_path)
    peak = _peak_rss_mb(["zipnum", "build", "big.cdxj", "-o", "big", *options], tmp_path)
    input_mb = (tmp_path / "big.cdxj").stat().st_size / 2**20
    # Held in a list, the lines would take more than the file's size on top of the baseline.
    assert peak - baseline < input_mb / 2, (baseline, peak, input_mb)
    assert len(_cluster_lines(tmp_path / "big")) == len(big)
