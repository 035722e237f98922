"""A destination that fills up: reported, never counted, retried at once (issue 25 §3).

A local storage on a 256 KiB tmpfs (mounted by the test, as root: CI runs
as root) receives a 787 KB file. ``store replicate`` fails and says so, the
claim it made is given back (no copy under way is left to look like one),
``store copies`` exits 1 naming the place, and once the destination has
room the next run makes the copy.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.e2e.support import gateway

CONFIG = """\
store:
  root: ./archive/store
  storages:
    small: {type: local, path: ./small}
  retention: {copies: 2}
collections:
  stored: $store
"""


def _ongoing(workdir: Path) -> int:
    db = workdir / "archive" / "store" / "index.sqlite3"
    conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        (n,) = conn.execute("SELECT COUNT(*) FROM copies WHERE status = 'ongoing'").fetchone()
    finally:
        conn.close()
    return int(n)


def test_a_full_destination_is_reported_and_its_claim_given_back(
    tmp_path: Path, sample_dir: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI and the sessions run as root)")
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(small)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here: {mounted.stderr}", pytrace=False)
    try:
        (tmp_path / "collections.yaml").write_text(CONFIG)
        shutil.copy(sample_dir / "warcs" / "iana.warc.gz", tmp_path / "iana.warc.gz")
        added = gateway(["store", "add", "--config", "collections.yaml", "iana.warc.gz"], tmp_path)
        assert added.returncode == 0, added.stderr
        args = ["store", "replicate", "--config", "collections.yaml", "--no-progress"]
        failed = gateway(args, tmp_path)
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "not safe: iana.warc.gz" in failed.stderr
        assert _ongoing(tmp_path) == 0  # the claim was given back: nothing looks under way
        listing = gateway(["store", "copies", "--config", "collections.yaml", "--json"], tmp_path)
        assert listing.returncode == 1
        report = json.loads(listing.stdout)
        (entry,) = report["files"]
        assert entry["state"] == "under-replicated"
        assert entry["copies"]["small"]["status"] == "missing"
        assert "space" in entry["copies"]["small"]["detail"].lower()
        assert report["safety"]["safe"] is False
        assert list(small.iterdir()) == []  # nothing half-written under any name
    finally:
        subprocess.run(["umount", str(small)], check=False)
    # Room again (the directory on the real disk): the next run makes the copy.
    made = gateway(args, tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    listing = gateway(["store", "copies", "--config", "collections.yaml", "--json"], tmp_path)
    assert listing.returncode == 0
    assert json.loads(listing.stdout)["safety"]["safe"] is True
