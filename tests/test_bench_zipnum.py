"""The ZipNum scale bench runs as docs/zipnum.md and bench/README.md write it.

A small cluster (20,000 lines) through every step but callgrind: the
generation, ``gateway zipnum build``, the lookups in process from local disk
and from a SeaweedFS the bench starts (the local shards uploaded), and the
first lookups over HTTP of the gateway on both and of pywb 2.10. The
figures themselves are the bench's business; this checks that the command
runs and that every server found every URL it was asked for.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.peer


@pytest.mark.timeout(600)
def test_the_documented_scale_bench_runs_on_a_small_cluster(tmp_path: Path) -> None:
    bench = [sys.executable, "-m", "bench.bench_zipnum", "--lines", "20000"]
    done = subprocess.run(
        [*bench, "--work", str(tmp_path), "--s3", "--s3-upload", "--http"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    names = {row.split(" | ")[0].removeprefix("| ") for row in rows}
    for kind in ("exact", "prefix", "closest"):
        assert {f"local {kind}", f"S3 {kind}"} <= names
        for server in ("gateway", "gateway on S3", "pywb"):
            assert f"{server} over HTTP, {kind}" in names
    found = [row for row in rows if "found" in row]
    assert len(found) == 6
    assert all("1000/1000 found" in row for row in found), found
    assert any(row.startswith("| upload to S3 |") for row in rows)
