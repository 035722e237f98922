"""A ZipNum cluster served by ``gateway serve``, as the configuration page writes it.

The config names the summary by a relative path, the typed mapping sets
``stat_interval_s``; the same lookup is answered from the kept lines of its
block again and again, and a cluster replaced the way builders replace one
(new files renamed over the old) is answered anew within ``stat_interval_s``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from gateway.cdx.cdxj import canonical_urlkey
from tests.conftest import _http_get, _start_until_ready
from tests.sources.zipnum_support import write_zipnum

URL = "http://example.com/page"
#: Generous: the answer must change within stat_interval_s (1 s) of the rename.
_CHANGE_WAIT_S = 60.0


def _lines(timestamp: str) -> list[bytes]:
    urls = sorted(f"http://example.com/{name}" for name in ("a", "page", "z"))
    return [
        f"{canonical_urlkey(url)} {timestamp} {json.dumps({'url': url, 'status': '200'})}".encode()
        for url in urls
    ]


def _replace_cluster(folder: Path, timestamp: str) -> None:
    """Write a new generation beside the cluster, then rename it over the old files."""
    fresh = folder / "next"
    fresh.mkdir()
    write_zipnum(_lines(timestamp), fresh, name="cluster", lines_per_block=2)
    for path in fresh.iterdir():
        os.replace(path, folder / path.name)
    fresh.rmdir()


def test_a_cluster_is_served_and_a_replaced_one_is_seen(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    write_zipnum(_lines("20200101000000"), tmp_path / "cluster", lines_per_block=2)
    (tmp_path / "collections.yaml").write_text(
        "collections:\n"
        "  web:\n"
        "    index: {type: zipnum, path: ./cluster/cluster.idx, stat_interval_s: 1}\n"
    )

    def argv(port: int) -> list[str]:
        return [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port)]

    server, port = _start_until_ready(
        "gateway", argv, tmp_path, lambda p: _http_get(p, "/_health") is not None
    )
    try:
        target = f"/web/index?url={URL}"
        for _ in range(3):  # the block's kept lines answer the repeats
            answer = _http_get(port, target)
            assert answer is not None, server.logs()
            assert answer[0] == 200, server.logs()
            assert answer[1].decode().split(" ")[:2] == [canonical_urlkey(URL), "20200101000000"]
        _replace_cluster(tmp_path / "cluster", "20230101000000")
        deadline = time.monotonic() + _CHANGE_WAIT_S
        seen = b""
        while time.monotonic() < deadline:
            answer = _http_get(port, target)
            assert answer is not None, server.logs()
            assert answer[0] == 200, server.logs()
            seen = answer[1]
            if b" 20230101000000 " in seen:
                break
            time.sleep(0.2)
        assert b" 20230101000000 " in seen, (seen, server.logs())
        assert seen.count(b"\n") == 1
    finally:
        server.stop()
