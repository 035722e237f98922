"""The preservation drill, run as a user would (issue 25, "done when").

One store, configured with relative paths only, replicating to two local
directories and to SeaweedFS (4 copies: the primary and three replicas).
Captures come from ``gateway store add`` of real files and from a recording
sequence of ``gateway serve``. Then, step by step: the server and its
background copies are killed with SIGKILL, a byte of the primary and of a
replica is flipped, a replica is deleted, S3 is stopped and brought back.
After each step ``store copies --json`` is compared with the SHA-256 of what
really is on each storage, every capture is loaded, and at the end every
capture is in 4 verified copies and none was dropped.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.e2e.support import (
    flip_byte,
    gateway,
    get,
    get_json,
    index_rows,
    kill9,
    live_web,
    local_objects,
    serve,
    sha256_of,
    until,
)
from tests.storage.seaweedfs import SeaweedFS, run_in_thread

BUCKET = "drill"

CONFIG = """\
store:
  root: ./archive/store
  rollover_s: 1                       # captures wait at most 1 s in an open file
  storages:
    backup1: {{type: local, path: ./backup1}}
    backup2: {{type: local, path: ./backup2}}
    s3: {{type: s3, endpoint: "{endpoint}", bucket: {bucket}, prefix: "gateway/"}}
  retention: {{copies: 4}}
jobs:
  replicate_interval_s: 1
collections:
  stored: $store
  web:
    sequence:
      - name: local
        index: $store
      - name: live
        index: {{type: live, allow_private_networks: true}}
        record: true
"""

SAMPLE_FILES = ("iana.warc.gz", "example.warc.gz", "dupes.warc.gz", "post-test.warc.gz")


class Drill:
    """The drill's working directory and what it checks after each step."""

    def __init__(self, workdir: Path, s3: SeaweedFS) -> None:
        self.workdir = workdir
        self.s3 = s3
        self.env = s3.environ()
        self.live = ""  # the live web stand-in's base URL, once it runs

    def run(self, *args: str) -> Any:
        return gateway(list(args), self.workdir, self.env)

    def add(self, name: str) -> None:
        done = self.run("store", "add", "--config", "collections.yaml", f"files/{name}")
        assert done.returncode == 0, done.stdout + done.stderr

    def copies(self) -> tuple[int, dict[str, Any]]:
        done = self.run("store", "copies", "--config", "collections.yaml", "--json")
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, json.loads(done.stdout)

    def s3_objects(self) -> dict[str, str]:
        async def listing() -> dict[str, str]:
            import hashlib

            found: dict[str, str] = {}
            async with self.s3.client() as client:
                pages = client.get_paginator("list_objects_v2")
                async for page in pages.paginate(Bucket=BUCKET, Prefix="gateway/"):
                    for entry in page.get("Contents", []):
                        key = entry["Key"]
                        name = key.removeprefix("gateway/")
                        if "/" in name:
                            continue  # staging keys of copies under way
                        got = await client.get_object(Bucket=BUCKET, Key=key)
                        async with got["Body"] as body:
                            found[name] = hashlib.sha256(await body.read()).hexdigest()
            return found

        return run_in_thread(listing())

    def truth(self) -> dict[str, dict[str, str]]:
        """``{place: {file name: SHA-256}}`` of what is on each place right now."""
        warcs = self.workdir / "archive" / "store" / "warcs"
        return {
            "primary": local_objects(warcs),
            "backup1": local_objects(self.workdir / "backup1"),
            "backup2": local_objects(self.workdir / "backup2"),
            "s3": self.s3_objects(),
        }

    def check_report(self) -> dict[str, Any]:
        """``store copies --json`` says exactly what is true: every copy it counts
        (verified) has the file's bytes on its storage; it says safe only when every
        file has 4 such copies and no capture waits; its exit status agrees."""
        status, report = self.copies()
        truth = self.truth()
        for entry in report["files"]:
            for place, copy in entry["copies"].items():
                if copy["safety"] == "verified":
                    held = truth[place].get(entry["name"])
                    assert held == entry["sha256"], (place, entry["name"], copy, held)
            verified = sum(c["safety"] == "verified" for c in entry["copies"].values())
            assert (entry["state"] == "safe") == (verified >= 4), entry
        safety = report["safety"]
        every_file_safe = all(entry["state"] == "safe" for entry in report["files"])
        assert safety["safe"] == (every_file_safe and safety["captures"]["not_safe"] == 0)
        assert status == (0 if safety["safe"] else 1)
        return report

    def wait_safe(self, what: str, timeout_s: float = 240.0) -> dict[str, Any]:
        def safe() -> bool:
            return bool(self.copies()[1]["safety"]["safe"])

        until(what, safe, timeout_s)
        return self.check_report()

    def captures(self, port: int) -> list[dict[str, str]]:
        rows = []
        for host in ("iana.org", "example.com"):
            rows += index_rows(port, "stored", host, match="domain")
        return rows + index_rows(port, "stored", f"{self.live}/page/", match="prefix")

    def load_all(self, port: int) -> int:
        rows = self.captures(port)
        for row in rows:
            path = (
                f"/stored/resource?url={quote(row['url'], safe='')}"
                f"&closest={row['timestamp']}&matchType=exact"
            )
            status, _, body = get(port, path)
            assert status == 200, (row, status, body[:300])
        return len(rows)

    def ongoing_claims(self) -> int:
        db = self.workdir / "archive" / "store" / "index.sqlite3"
        conn = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
        try:
            (n,) = conn.execute("SELECT COUNT(*) FROM copies WHERE status = 'ongoing'").fetchone()
        finally:
            conn.close()
        return int(n)


@pytest.mark.timeout(1200)
def test_the_preservation_drill(tmp_path: Path, sample_dir: Path, seaweedfs: SeaweedFS) -> None:
    run_in_thread(seaweedfs.create_bucket(BUCKET))
    drill = Drill(tmp_path, seaweedfs)
    (tmp_path / "collections.yaml").write_text(
        CONFIG.format(endpoint=seaweedfs.endpoint, bucket=BUCKET)
    )
    for place in ("backup1", "backup2", "files"):
        (tmp_path / place).mkdir()
    for name in SAMPLE_FILES:
        shutil.copy(sample_dir / "warcs" / name, tmp_path / "files" / name)

    # 1. Files handed in: one copy each, and the report says so (exit 1).
    drill.add("iana.warc.gz")
    report = drill.check_report()
    assert report["safety"]["safe"] is False
    assert report["summary"]["under_replicated"] == 1

    # 2. The server records and replicates by itself; captures in the open file count.
    with live_web() as web:
        drill.live = web.base
        server, port = serve(tmp_path, env=drill.env)
        try:
            for n in range(5):
                status, _, _ = get(port, f"/web/resource?url={quote(f'{web.base}/page/{n}')}")
                assert status == 200
            until(
                "5 recorded captures",
                lambda: len(index_rows(port, "stored", f"{web.base}/page/", "prefix")) == 5,
            )
            status_body = get_json(port, "/_status")["store"]
            assert status_body["safe"] is False or status_body["captures"]["not_safe"] == 0
            drill.wait_safe("every capture safe in 4 copies (the server's own replication)")
            until("/_status says safe", lambda: get_json(port, "/_status")["store"]["safe"])
            total = drill.load_all(port)
            assert total >= 5
        finally:
            server.stop()

    # 3. SIGKILL in the middle of copies, three times: a claim is never a copy.
    for round_, name in enumerate(SAMPLE_FILES[1:]):
        assert (
            drill.run("store", "add", "--config", "collections.yaml", f"files/{name}").returncode
            == 0
        )
        server, port = serve(tmp_path, env=drill.env, name=f"kill-{round_}")
        try:
            until(
                "a copy under way",
                lambda: drill.ongoing_claims() > 0 or drill.copies()[0] == 0,
                120,
            )
        finally:
            kill9(server)
        report = drill.check_report()  # the dead server's claims: under way at most, never safe
        for entry in report["files"]:
            for copy in entry["copies"].values():
                assert copy["status"] != "ongoing" or copy["safety"] in ("under_way", "missing")
    # The next run releases the dead holders' claims at once and makes the copies.
    replicated = drill.run("store", "replicate", "--config", "collections.yaml", "--no-progress")
    assert replicated.returncode == 0, replicated.stdout + replicated.stderr
    assert drill.ongoing_claims() == 0
    drill.check_report()
    files_before = {entry["name"]: entry["sha256"] for entry in drill.copies()[1]["files"]}

    # 4. A byte of a primary flipped: repair restores it from a copy, dropping nothing.
    warcs = tmp_path / "archive" / "store" / "warcs"
    (damaged,) = [p for p in warcs.rglob("iana.warc.gz")]
    flip_byte(damaged)
    checked = drill.run("store", "check", "--config", "collections.yaml")
    assert checked.returncode == 1
    assert "restores a damaged or missing file from a verified copy first" in checked.stdout
    repaired = drill.run("store", "repair", "--config", "collections.yaml", "--no-progress")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "restored iana.warc.gz from" in repaired.stdout
    assert "lost" not in repaired.stdout
    assert "salvaged" not in repaired.stdout
    assert sha256_of(damaged) == files_before["iana.warc.gz"]
    assert drill.run("store", "check", "--config", "collections.yaml").returncode == 0
    drill.check_report()

    # 5. A byte of a replica flipped, another replica deleted: scrub finds both,
    #    replicate mends both from good copies.
    victim = sorted(files_before)[0]
    (copy1,) = [p for p in (tmp_path / "backup1").rglob(victim)]
    flip_byte(copy1)
    (copy2,) = [p for p in (tmp_path / "backup2").rglob(victim)]
    copy2.unlink()
    scrubbed = drill.run("store", "scrub", "--config", "collections.yaml", "--no-progress")
    assert scrubbed.returncode == 1, scrubbed.stdout + scrubbed.stderr
    report = drill.check_report()
    (entry,) = [e for e in report["files"] if e["name"] == victim]
    assert entry["state"] != "safe"
    assert entry["copies"]["backup1"]["status"] == "corrupted"
    assert entry["copies"]["backup2"]["status"] == "missing"
    mended = drill.run("store", "replicate", "--config", "collections.yaml", "--no-progress")
    assert mended.returncode == 0, mended.stdout + mended.stderr
    drill.check_report()

    # 6. S3 down: the run fails, says so, leaves no claim; S3 back: the next run mends it.
    shutil.copy(
        sample_dir / "warcs" / "example-wpull.warc.gz", tmp_path / "files" / "wpull.warc.gz"
    )
    assert (
        drill.run("store", "add", "--config", "collections.yaml", "files/wpull.warc.gz").returncode
        == 0
    )
    seaweedfs.kill()
    try:
        failed = drill.run(
            "store", "replicate", "--config", "collections.yaml", "--no-progress", "--once"
        )
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "not safe: wpull.warc.gz" in failed.stderr
        assert drill.ongoing_claims() == 0
        status, report = drill.copies()
        assert status == 1
        (entry,) = [e for e in report["files"] if e["name"] == "wpull.warc.gz"]
        assert entry["copies"]["s3"]["safety"] != "verified"
    finally:
        seaweedfs.restart()
    back = drill.run("store", "replicate", "--config", "collections.yaml", "--no-progress")
    assert back.returncode == 0, back.stdout + back.stderr

    # The end: every capture loads, every file is in 4 verified copies, nothing dropped.
    report = drill.check_report()
    assert report["safety"]["safe"] is True
    assert all(entry["state"] == "safe" for entry in report["files"])
    assert set(files_before) <= {entry["name"] for entry in report["files"]}
    server, port = serve(tmp_path, env=drill.env, name="final")
    try:
        assert drill.load_all(port) >= total
    finally:
        server.stop()
