"""The snapshot store as the docs configure it, relative paths and all (issue 25 §1, §8, §9).

Each test works in a temporary directory of its own, writes the config of
docs/store.md as written (``store: {root: ./archive/store}``, a ``$store``
collection, a sequence of ``$store`` then a recording live step; only the live
step may reach 127.0.0.1, where an aiohttp server stands in for the web) and
runs the installed ``gateway`` command there.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.e2e.support import GATEWAY, gateway, get, index_rows, live_web, serve, until

DOCS = Path(__file__).resolve().parents[2] / "docs" / "store.md"


def _docs_config() -> str:
    """docs/store.md's example as written, but for the live step, which may reach the
    test's stand-in web server on 127.0.0.1 (the docs' reaches the public web only)."""
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None, "docs/store.md shows its config first"
    live = "index: {type: live}"
    assert live in block.group(1)
    return block.group(1).replace(live, "index: {type: live, allow_private_networks: true}")


STORE_CONFIG = _docs_config()


def test_captures_stored_under_a_relative_root_load_and_are_never_recorded_twice(
    tmp_path: Path, sample_dir: Path
) -> None:
    (tmp_path / "collections.yaml").write_text(STORE_CONFIG)
    (tmp_path / "incoming").mkdir()
    shutil.copy(sample_dir / "warcs" / "iana.warc.gz", tmp_path / "incoming" / "iana.warc.gz")
    added = gateway(
        ["store", "add", "--config", "collections.yaml", "incoming/iana.warc.gz"], tmp_path
    )
    assert added.returncode == 0, added.stderr
    with live_web() as web:
        server, port = serve(tmp_path)
        try:
            url = f"{web.base}/page/1"
            status, _, body = get(port, f"/web/resource?url={quote(url, safe='')}")
            assert status == 200, body[:300]
            assert web.hits == {"/page/1": 1}
            until(
                "the recorded capture is indexed", lambda: len(index_rows(port, "stored", url)) == 1
            )
            # The recorded capture loads from the store (it answered 404 under a relative root).
            status, _, body = get(port, f"/stored/resource?url={quote(url, safe='')}")
            assert status == 200, body[:300]
            assert b"page 1" in body
            # So does one that `store add` brought in, from the same relative root.
            status, _, body = get(port, "/stored/resource?url=http://www.iana.org/")
            assert status == 200, body[:300]
            # Asked again through the sequence, it comes from the store: no new capture.
            for _ in range(3):
                status, _, _ = get(port, f"/web/resource?url={quote(url, safe='')}")
                assert status == 200
            assert web.hits == {"/page/1": 1}
            assert len(index_rows(port, "stored", url)) == 1

            # The store's file goes missing: a 5xx naming it, never a fall-through that records.
            (row,) = index_rows(port, "stored", url)
            warcs = tmp_path / "archive" / "store" / "warcs"
            (path,) = [p for p in warcs.rglob("*") if p.name.startswith(row["filename"])]
            hidden = tmp_path / "hidden.warc.gz"
            path.rename(hidden)
            try:
                for _ in range(3):
                    status, headers, body = get(port, f"/web/resource?url={quote(url, safe='')}")
                    assert status == 503, body[:300]
                    assert "retry-after" in headers
                    assert row["filename"] in body.decode()
            finally:
                hidden.rename(path)
            assert web.hits == {"/page/1": 1}
            assert len(index_rows(port, "stored", url)) == 1
            status, _, body = get(port, f"/web/resource?url={quote(url, safe='')}")
            assert status == 200, body[:300]
        finally:
            server.stop()


def test_the_store_commands_and_the_server_agree_on_the_relative_root(tmp_path: Path) -> None:
    (tmp_path / "collections.yaml").write_text(STORE_CONFIG)
    with live_web() as web:
        server, port = serve(tmp_path)
        try:
            url = f"{web.base}/page/2"
            assert get(port, f"/web/resource?url={quote(url, safe='')}")[0] == 200
            until("the capture is indexed", lambda: len(index_rows(port, "stored", url)) == 1)
        finally:
            server.stop()
    # Another command, from the same directory, finds the same store and capture.
    history = gateway(["store", "history", "--config", "collections.yaml", url], tmp_path)
    assert history.returncode == 0, history.stderr
    assert "page/2" in history.stdout
    checked = gateway(["store", "check", "--config", "collections.yaml"], tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OK" in checked.stdout


def test_serve_refuses_an_earlier_releases_store_before_it_says_serving(tmp_path: Path) -> None:
    """Issue 25 §9: checked before announcing; exit 2, the message, no log noise."""
    (tmp_path / "collections.yaml").write_text("collections:\n  stored: $store\n")
    legacy = tmp_path / "archive"
    legacy.mkdir()
    (legacy / "index.sqlite3").write_bytes(b"")  # an earlier release's default root
    done = gateway(["serve", "--host", "127.0.0.1", "--port", "0"], tmp_path, timeout_s=60)
    assert done.returncode == 2, done.stderr
    assert "holds a store made by an earlier release" in done.stderr
    assert "serving" not in done.stderr
    assert "Unclosed" not in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "archive" / "store").exists()


@pytest.mark.parametrize("command", [["jobs"], ["worker"]])
def test_jobs_and_worker_say_the_same_of_a_config_without_a_store(
    tmp_path: Path, command: list[str]
) -> None:
    """Issue 25 §9: the default config uses no store; neither command creates one."""
    shutil.copy(Path(__file__).resolve().parents[2] / "collections.yaml", tmp_path)
    done = gateway(command, tmp_path, timeout_s=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "collections.yaml uses no store" in done.stderr
    assert not (tmp_path / "archive" / "store").exists()


def test_store_add_refuses_a_wrong_content_length_and_says_how_to_fix_it(
    tmp_path: Path, sample_dir: Path
) -> None:
    """Issue 25 §8, as docs/store.md tells it: refused with the fix; the fix is stored."""
    shutil.copy(sample_dir / "warcs" / "example.warc", tmp_path / "example.warc")
    indexed = gateway(["index", "example.warc", "-o", "example.cdxj"], tmp_path)
    assert indexed.returncode == 0, indexed.stderr  # warcio reads past the wrong length
    refused = gateway(["store", "add", "example.warc"], tmp_path)
    assert refused.returncode == 1
    assert "wrong Content-Length" in refused.stderr
    assert "`warcio recompress " in refused.stderr
    assert "example.warc FIXED.warc.gz`" in refused.stderr
    fixed = tmp_path / "example-fixed.warc.gz"
    recompress = Path(GATEWAY).with_name("warcio")
    done = subprocess.run(
        [str(recompress), "recompress", "example.warc", fixed.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    added = gateway(["store", "add", fixed.name], tmp_path)
    assert added.returncode == 0, added.stderr
    assert "1 imported" in added.stdout
