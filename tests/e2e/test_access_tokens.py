"""docs/access-tokens.md as a user runs it: its config, its commands, its answers.

The test works in a temporary directory of its own, writes the page's
config as written (relative store root), but for the live collection, which
may reach the test's stand-in web server on 127.0.0.1 (the docs' reaches the
public web only), starts the installed ``gateway serve`` there with the
admin token in the environment as the page exports it, and runs the page's
``bash`` block line by line: each command exits 0, each ``curl -si`` answers
the status its comment names, with ``8080`` the test server's port and
``http://example.com/`` a page of the stand-in web. Until the first line
that may record, the store must hold no capture and the stand-in web must
have seen no request: a refused request fetched and stored nothing.
"""

from __future__ import annotations

import functools
import gzip
import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Final

from tests.e2e.support import GATEWAY, gateway, get, live_web, serve, until

DOCS: Final = Path(__file__).resolve().parents[2] / "docs" / "access-tokens.md"
TEXT: Final = DOCS.read_text(encoding="utf-8")
_STATUS: Final = re.compile(r"#\s*(\d{3})\s*$")


def _block(fence: str) -> str:
    block = re.search(rf"```{fence}\n(.*?)```", TEXT, re.S)
    assert block is not None, f"docs/access-tokens.md has a {fence} block"
    return block.group(1)


def _config() -> str:
    live = "index: {type: live}"
    config = _block("yaml")
    assert live in config
    return config.replace(live, "index: {type: live, allow_private_networks: true}")


def _lines() -> list[str]:
    return [line for line in _block("bash").splitlines() if line.strip()]


def _admin_token() -> str:
    found = re.search(r"^export GATEWAY_ADMIN_TOKEN=(\S+)", _block("bash"), re.M)
    assert found is not None
    return found.group(1)


def _captures(workdir: Path) -> int:
    """Captures in the store's index (``archive/store/index.sqlite3``), read directly."""
    with sqlite3.connect(workdir / "archive" / "store" / "index.sqlite3") as db:
        (count,) = db.execute("SELECT count(*) FROM captures").fetchone()
    assert isinstance(count, int)
    return count


def _bash(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _check_line(line: str, command: str, cwd: Path, env: dict[str, str]) -> int | None:
    """Run one line of the page's block; the HTTP status of a curl line (None otherwise),
    checked against its comment, with the ``WWW-Authenticate`` the page's table shows."""
    done = _bash(command, cwd, env)
    assert done.returncode == 0, (line, done.stderr)
    if "curl" not in line:
        assert done.stdout.strip() or line.startswith("export"), line
        return None
    expected = _STATUS.search(line)
    assert expected is not None, line
    status = int(expected.group(1))
    if "/stored/" in line:  # the capture is acknowledged just after its answer
        until(f"{line}: {status}", functools.partial(_answers, command, cwd, env, status))
        return status
    assert _status_of(done.stdout) == status, (line, done.stdout[:500])
    challenge = _header(done.stdout, "WWW-Authenticate")
    assert (challenge is not None) == (status in (400, 401, 403)), line
    if challenge is not None:  # as the page's table of answers writes it
        shown = challenge.replace('scope="admin"', 'scope="record"')
        assert f"| {status} | `{shown}` |" in TEXT, (line, challenge)
    return status


def test_the_page_as_written(tmp_path: Path) -> None:
    (tmp_path / "collections.yaml").write_text(_config())
    bin_dir = str(Path(GATEWAY).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GATEWAY_ADMIN_TOKEN": _admin_token(),
    }
    checked = gateway(["check-config", "collections.yaml"], tmp_path, env=env)
    assert checked.returncode == 0, checked.stderr
    assert "tokens: 2, required by" in checked.stdout
    assert "/_jobs: scope admin" in checked.stdout
    assert "example-" not in checked.stdout
    with live_web() as web:
        page = f"{web.base}/page/1"
        server, port = serve(tmp_path, env=env)
        try:
            recorded = False
            for line in _lines():
                command = line.replace("8080", str(port)).replace("http://example.com/", page)
                status = _check_line(line, command, tmp_path, env)
                recorded = recorded or ("/live/" in line and status == 200)
                if not recorded:  # refused: nothing fetched, nothing stored
                    assert web.hits == {}, line
                    assert _captures(tmp_path) == 0, line
            assert recorded
            assert web.hits == {"/page/1": 1}
            until("the capture is indexed", functools.partial(_captures_are, tmp_path, 1))
            status, _, _ = get(port, "/openapi.json")
            assert status == 200  # public read routes stay open
            status, _, _ = get(port, "/metrics")
            assert status == 401  # require.admin names it
        finally:
            server.stop()
    # The token is nowhere in the store (its WARC files read decompressed).
    held = b""
    for file in (tmp_path / "archive" / "store").rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            held += gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    assert page.encode() in held
    assert b"example-record-token-replace-me" not in held


def _captures_are(workdir: Path, count: int) -> bool:
    return _captures(workdir) == count


def _answers(command: str, cwd: Path, env: dict[str, str], status: int) -> bool:
    return _status_of(_bash(command, cwd, env).stdout) == status


def _status_of(output: str) -> int:
    first = output.split("\n", 1)[0]
    match = re.match(r"HTTP/1\.1 (\d{3}) ", first)
    assert match is not None, output[:300]
    return int(match.group(1))


def _header(output: str, name: str) -> str | None:
    """The value of header ``name`` in ``curl -si`` output (its head only)."""
    head = output.replace("\r\n", "\n").split("\n\n", 1)[0]
    for line in head.split("\n")[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


def test_token_hash_prints_the_digest_the_config_holds(tmp_path: Path) -> None:
    digest = re.search(r"sha256: ([0-9a-f]{64})", _block("yaml"))
    assert digest is not None
    for given in ("example-record-token-replace-me", "example-record-token-replace-me\n"):
        done = subprocess.run(
            [GATEWAY, "token", "hash"], input=given, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{digest.group(1)}\n"
    done = subprocess.run(
        [GATEWAY, "token", "hash"], input="too short\n", capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "not a bearer token" in done.stderr
    assert "too short" not in done.stderr
    made = gateway(["token", "new"], tmp_path)
    assert made.returncode == 0
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}\n", made.stdout)


def test_an_unset_environment_token_stops_start_up(tmp_path: Path) -> None:
    (tmp_path / "collections.yaml").write_text(_config())
    env = {k: v for k, v in os.environ.items() if k != "GATEWAY_ADMIN_TOKEN"}
    run = subprocess.run(
        [GATEWAY, "serve", "--port", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2
    assert "auth.tokens[1].env: the environment variable GATEWAY_ADMIN_TOKEN is not set" in (
        run.stderr
    )
    assert not (tmp_path / "archive" / "store").exists()


def test_two_workers_check_before_anything_is_forwarded(tmp_path: Path) -> None:
    """``--workers 2``: whichever worker a connection reaches, a request without the
    token is a 401 that no worker forwarded (no ``Via``), fetched or stored; with the
    token every page is recorded once, by worker 0 (the forwarding itself is
    shown deterministically in ``tests/test_recorder_link_auth.py``)."""
    (tmp_path / "collections.yaml").write_text(_config())
    env = {**os.environ, "GATEWAY_ADMIN_TOKEN": _admin_token()}
    with live_web() as web:
        server, port = serve(tmp_path, "--workers", "2", env=env)
        try:
            until("/_ready", lambda: get(port, "/_ready")[0] == 200)
            pages = [f"{web.base}/page/{n}" for n in range(12)]
            for page in pages:
                status, headers, _ = get(port, f"/live/resource?url={page}")
                assert status == 401
                assert "via" not in headers
                assert headers["www-authenticate"].startswith("Bearer ")
            assert web.hits == {}
            assert _captures(tmp_path) == 0
            forwarded = 0
            for page in pages:
                status, headers = _get_with_token(port, f"/live/resource?url={page}")
                assert status == 200
                forwarded += "via" in headers
            until("12 captures stored", functools.partial(_captures_are, tmp_path, 12))
            assert web.hits == {f"/page/{n}": 1 for n in range(12)}
            print(f"{forwarded} of 12 recorded through worker 1")
        finally:
            server.stop()


def _get_with_token(port: int, path: str) -> tuple[int, dict[str, str]]:
    """``GET path`` with the docs' record token; retried while worker 0 is not there (503)."""
    import http.client

    for _ in range(100):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            headers = {"Authorization": "Bearer example-record-token-replace-me"}
            conn.request("GET", path, headers={**headers, "Connection": "close"})
            response = conn.getresponse()
            response.read()
            if response.status != 503:
                return response.status, {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        time.sleep(0.2)
    raise AssertionError(f"{path}: 503 for 20 s")
