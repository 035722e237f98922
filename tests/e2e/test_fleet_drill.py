"""The fleet leg of the preservation drill (issue 25 §2 and §5, "done when").

docs/replication.md's two configs, as written: a recording host with
``store.publish`` and ``rollover_s: 10``, and stateless gateways that read
only Redis and S3. The hosts ``s3.internal`` and ``redis.internal`` become
SeaweedFS and a ``redis-server`` of this test on 127.0.0.1, and the live
step may reach the test's stand-in web server on 127.0.0.1; nothing else is
changed. 20 captures are recorded; the time until both stateless gateways
serve every one is measured and bounded by ``rollover_s`` plus the copy
time. Then S3, and then Redis, is stopped: each is a 503 naming it.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import _redis_answers_ping, _Server, _start_until_ready
from tests.e2e.support import get, live_web, serve, until
from tests.storage.seaweedfs import SeaweedFS, run_in_thread

DOCS = Path(__file__).resolve().parents[2] / "docs" / "replication.md"
CAPTURES = 20
#: The copy time allowed on top of rollover_s (a machine 5x slower than this one passes).
COPY_ALLOWANCE_S = 90.0


def _docs_configs() -> tuple[str, str]:
    """The recording host's and a stateless gateway's YAML from docs/replication.md."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Many machines") :]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    host = next(b for b in blocks if "publish:" in b)
    fleet = next(b for b in blocks if "resource: s3+" in b)
    return host, fleet


def _redis(workdir: Path) -> tuple[_Server, int]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: scripts/test installs it", pytrace=False)

    def argv(port: int) -> list[str]:
        options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        return [binary, "--port", str(port), *options, "--dir", str(workdir)]

    return _start_until_ready("redis-server", argv, workdir, _redis_answers_ping)


@pytest.mark.timeout(600)
def test_the_fleet_serves_every_capture_within_rollover_s_and_says_what_is_down(
    tmp_path: Path, seaweedfs: SeaweedFS
) -> None:
    host_yaml, fleet_yaml = _docs_configs()
    found = re.search(r"rollover_s: (\d+)", host_yaml)
    assert found is not None, "the docs' recording host sets rollover_s"
    rollover_s = float(found.group(1))
    run_in_thread(seaweedfs.create_bucket("warcs"))
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    redis, redis_port = _redis(redis_dir)

    def localize(text: str) -> str:
        return (
            text.replace("http://s3.internal:8333", seaweedfs.endpoint)
            .replace("redis.internal:6379", f"127.0.0.1:{redis_port}")
            .replace("index: {type: live}", "index: {type: live, allow_private_networks: true}")
        )

    host, fleet1, fleet2 = (tmp_path / name for name in ("host", "fleet1", "fleet2"))
    for directory, text in ((host, host_yaml), (fleet1, fleet_yaml), (fleet2, fleet_yaml)):
        directory.mkdir()
        (directory / "collections.yaml").write_text(localize(text))
    env = seaweedfs.environ()
    servers = []
    try:
        with live_web() as web:
            recorder, rport = serve(host, env=env, name="recording-host")
            servers.append(recorder)
            stateless = [serve(d, env=env, name=d.name) for d in (fleet1, fleet2)]
            servers += [server for server, _ in stateless]
            urls = [f"{web.base}/page/{n}" for n in range(CAPTURES)]
            started = time.monotonic()
            for url in urls:
                assert get(rport, f"/web/resource?url={quote(url, safe='')}")[0] == 200

            def served_everywhere() -> bool:
                return all(
                    get(port, f"/archive/resource?url={quote(url, safe='')}")[0] == 200
                    for _, port in stateless
                    for url in urls
                )

            bound_s = rollover_s + COPY_ALLOWANCE_S
            until("every capture served by both stateless gateways", served_everywhere, bound_s)
            elapsed_s = time.monotonic() - started
            print(f"time to the fleet for {CAPTURES} captures: {elapsed_s:.1f} s")
            assert elapsed_s < bound_s

            # S3 down: captures exist but cannot be read there, a 503 naming it.
            (_, port), url = stateless[0], urls[0]
            seaweedfs.kill()
            try:
                status, headers, body = get(port, f"/archive/resource?url={quote(url, safe='')}")
                assert status == 503, body[:300]
                assert "retry-after" in headers
                assert seaweedfs.endpoint.split("//")[1] in body.decode() or "s3" in body.decode()
            finally:
                seaweedfs.restart()
            resource = f"/archive/resource?url={quote(url, safe='')}"
            until("S3 serves again", lambda: get(port, resource)[0] == 200)

            # Redis down: the index cannot be asked, a 503 naming it, never an empty 200.
            redis.stop()
            for path in (
                f"/archive/resource?url={quote(url, safe='')}",
                f"/archive/index?url={quote(url, safe='')}",
            ):
                status, headers, body = get(port, path)
                assert status == 503, (path, body[:300])
                assert "redis" in body.decode().lower()
    finally:
        for server in servers:
            server.stop()
        redis.stop()
