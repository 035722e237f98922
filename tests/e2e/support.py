"""The ``gateway`` command as a user runs it: subprocesses in a working directory of their own.

Every test here writes its ``collections.yaml`` the way the docs write it,
relative paths included, into a fresh temporary directory and runs the
installed ``gateway`` script (``.venv/bin/gateway``, the console script of
``pip install -e .``) there. Servers listen on 127.0.0.1 only and are stopped
(SIGTERM, then SIGKILL) by the test that started them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from tests.conftest import _http_get, _Server, _start_until_ready

#: The console script ``pip install -e .`` made beside the test's Python.
GATEWAY: Final = str(Path(sys.executable).with_name("gateway"))
#: The longest any one command of a test may run (generous: a machine 5x slower passes).
COMMAND_TIMEOUT_S: Final = 300.0


def gateway(
    args: list[str], cwd: Path, env: Mapping[str, str] | None = None, timeout_s: float = 300.0
) -> subprocess.CompletedProcess[str]:
    """Run ``gateway ARGS`` in ``cwd`` (no terminal: no progress bars) and wait."""
    run_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [GATEWAY, *args],
        cwd=cwd,
        env=run_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def serve(
    cwd: Path, *extra: str, env: Mapping[str, str] | None = None, name: str = "gateway"
) -> tuple[_Server, int]:
    """``gateway serve`` of ``cwd/collections.yaml``, started in ``cwd`` on a free port
    and answering ``/_health``; returns the server and its port."""

    def argv(port: int) -> list[str]:
        return [GATEWAY, "serve", "--host", "127.0.0.1", "--port", str(port), *extra]

    return _start_until_ready(
        name,
        argv,
        cwd,
        lambda p: _http_get(p, "/_health") is not None,
        env={**os.environ, **(env or {})},
    )


def kill9(server: _Server) -> None:
    """SIGKILL the server's whole process group and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait(timeout=30)


def get(port: int, path: str, timeout_s: float = 60.0) -> tuple[int, dict[str, str], bytes]:
    """``GET path`` on 127.0.0.1:``port``: status, headers (lower-case names), body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        response = conn.getresponse()
        body = response.read()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return response.status, headers, body
    finally:
        conn.close()


def get_json(port: int, path: str) -> Any:
    status, _, body = get(port, path)
    assert status == 200, (path, status, body[:500])
    return json.loads(body)


def until(what: str, condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    """Poll ``condition`` every 0.2 s; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.2)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def local_objects(directory: Path) -> dict[str, str]:
    """``{file name: SHA-256}`` of the WARC files under a local storage's directory."""
    return {
        path.name: sha256_of(path)
        for path in directory.rglob("*")
        if path.is_file() and path.name.endswith((".warc.gz", ".warc", ".arc", ".arc.gz"))
    }


def flip_byte(path: Path, offset: int | None = None) -> None:
    """Change one byte of ``path`` in place (the middle one by default)."""
    with path.open("r+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        at = size // 2 if offset is None else offset
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0x20]))


class LiveWeb:
    """An aiohttp server on 127.0.0.1 standing in for the live web, in a thread.

    ``GET /page/N`` answers a small HTML page that names N; ``hits`` counts
    the requests per path.
    """

    def __init__(self) -> None:
        self.port = 0
        self.hits: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _page(self, request: web.Request) -> web.Response:
        self.hits[request.path] = self.hits.get(request.path, 0) + 1
        number = request.match_info["n"]
        body = f"<html><title>page {number}</title><p>{'x' * 2000} {number}</p></html>"
        return web.Response(text=body, content_type="text/html")

    async def _main(self, ready: threading.Event) -> None:
        app = web.Application()
        app.router.add_get("/page/{n}", self._page)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.port = runner.addresses[0][1]
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        ready.set()
        try:
            await self._stopped.wait()
        finally:
            await runner.cleanup()

    def start(self) -> LiveWeb:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._main(ready)), name="live-web", daemon=True
        )
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError("the live web stand-in did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(30)


@contextlib.contextmanager
def live_web() -> Iterator[LiveWeb]:
    web = LiveWeb().start()
    try:
        yield web
    finally:
        web.stop()


def index_rows(port: int, coll: str, url: str, match: str = "exact") -> list[dict[str, str]]:
    """The CDXJ JSON rows of ``url`` in ``coll`` (``output=json``), as the Index API gives them."""
    from urllib.parse import quote

    status, _, body = get(
        port, f"/{coll}/index?url={quote(url, safe='')}&output=json&matchType={match}"
    )
    if status == 404:
        return []
    assert status == 200, (status, body[:500])
    return [json.loads(line) for line in body.decode().splitlines() if line.strip()]
