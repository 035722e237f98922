"""``gateway serve --workers N``: N real processes on one port, replaced when they die.

Each test runs ``python -m gateway.cli serve`` as a child process (127.0.0.1,
a free port, its own process group, killed in teardown) and looks at its
workers through ``/proc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Final

import pytest

from tests.conftest import free_port

#: Generous bounds for things that take well under a second (never a timing assertion).
WAIT_S: Final = 30.0


def _children(pid: int) -> set[int]:
    """Live child processes of ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def _listening_inodes(pid: int) -> set[str]:
    """Socket inodes among ``pid``'s open files."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    return inodes


def _open_paths(pid: int) -> set[str]:
    """The paths of the files ``pid`` has open."""
    paths = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            paths.add(os.readlink(fd))
    return paths


def _serve_argv(config: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), *options]


def _run_serve(config: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """``gateway serve`` expected to exit at once (a refusal): its status and output."""
    return subprocess.run(
        _serve_argv(config, *options), capture_output=True, text=True, timeout=WAIT_S, check=False
    )


def _get(port: int, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
        return answer.status, answer.read()


def _wait_for(
    what: str, check: Callable[[], bool], proc: subprocess.Popen[bytes] | None, log: Path
) -> None:
    """Poll ``check`` until true; fail (with the log) after WAIT_S or when ``proc`` exits."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if check():
                return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f"{what} did not happen; gateway log:\n{log.read_text()[-3000:]}")


@pytest.fixture
def config(sample_dir: Path, tmp_path: Path) -> Path:
    path = tmp_path / "collections.yaml"
    path.write_text(
        f"collections:\n  iana:\n    index: {sample_dir}/cdxj/iana.cdxj\n"
        f"    resource: {sample_dir}/warcs/\n"
    )
    return path


class _Gateway:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    def workers(self) -> set[int]:
        return _children(self.proc.pid)

    def answers(self) -> bool:
        return _get(self.port, "/_health")[0] == 200


def _start_two_workers(config: Path, tmp_path: Path) -> _Gateway:
    """``gateway serve --workers 2`` of ``config`` on a free port, in its own process group."""
    port = free_port()
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            _serve_argv(config, "--port", str(port), "--workers", "2"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return _Gateway(proc, port, log)


@pytest.fixture
def serve(config: Path, tmp_path: Path) -> Iterator[_Gateway]:
    gateway = _start_two_workers(config, tmp_path)
    proc, log = gateway.proc, gateway.log
    try:
        _wait_for("two workers answering", lambda: len(gateway.workers()) == 2, proc, log)
        _wait_for("/_health answering", gateway.answers, proc, log)
        yield gateway
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT_S)


def test_workers_share_one_listening_socket_and_answer(serve: _Gateway) -> None:
    workers = serve.workers()
    assert len(workers) == 2
    shared = _listening_inodes(serve.proc.pid)
    for pid in workers:
        assert shared & _listening_inodes(pid), f"worker {pid} lacks the listening socket"
    status, body = _get(serve.port, "/iana/index?url=http://www.iana.org/")
    assert status == 200
    assert body.startswith(b"org,iana)/ 20140126200624 ")


def test_a_killed_worker_is_replaced_and_the_port_keeps_answering(serve: _Gateway) -> None:
    before = serve.workers()
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    _wait_for(
        "a new worker in place of the killed one",
        lambda: len(serve.workers()) == 2 and victim not in serve.workers(),
        serve.proc,
        serve.log,
    )
    survivors = serve.workers()
    assert survivors & before == before - {victim}
    for _ in range(20):
        assert _get(serve.port, "/_health")[0] == 200
    assert f"(pid {victim}) exited with signal SIGKILL" in serve.log.read_text()


def test_sigterm_stops_every_worker_and_exits_0(serve: _Gateway) -> None:
    workers = serve.workers()
    os.kill(serve.proc.pid, signal.SIGTERM)
    assert serve.proc.wait(timeout=WAIT_S) == 0
    for pid in workers:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_workers_stop_themselves_when_the_supervisor_is_killed(serve: _Gateway) -> None:
    workers = serve.workers()
    os.kill(serve.proc.pid, signal.SIGKILL)
    serve.proc.wait(timeout=WAIT_S)

    def all_gone() -> bool:
        return not any(Path(f"/proc/{pid}").exists() for pid in workers)

    _wait_for("the orphaned workers to exit", all_gone, None, serve.log)


class _LiveWeb(ThreadingHTTPServer):
    """The live web on 127.0.0.1, in a thread: ``/page/<n>`` says its number."""

    def __init__(self) -> None:
        class Page(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = f"<html>{self.path}</html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        super().__init__(("127.0.0.1", 0), Page)
        self.base = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def live_web() -> Iterator[str]:
    server = _LiveWeb()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.base
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT_S)


def _writer(workers: set[int], lock: str) -> int | None:
    """The worker holding the store's writer lock open (worker 0, the recorder), if any."""
    holders = [pid for pid in workers if lock in _open_paths(pid)]
    return holders[0] if len(holders) == 1 else None


def test_workers_record_through_worker_0_and_a_killed_one_is_replaced(
    tmp_path: Path, live_web: str
) -> None:
    root = tmp_path / "archive"
    config = tmp_path / "collections.yaml"
    config.write_text(
        f"store: {{root: {root}, fsync: never}}\ncollections:\n  stored: $store\n  rec:\n"
        "    sequence:\n      - name: live\n"
        "        index: {type: live, allow_private_networks: true}\n        record: true\n"
    )
    gateway = _start_two_workers(config, tmp_path)
    proc, port, log = gateway.proc, gateway.port, gateway.log
    lock = str(root / "writer.lock")

    def recorder_ready() -> bool:
        workers = gateway.workers()
        ready = _get(port, "/_ready")[0] == 200
        return len(workers) == 2 and _writer(workers, lock) is not None and ready

    def record(n: int) -> bool:
        try:
            status, body = _get(port, f"/rec/resource?url={live_web}/page/{n}")
        except urllib.error.HTTPError as exc:  # 503 while worker 0 is replaced
            if exc.code == 503:
                return False
            raise
        assert status == 200
        assert f"<html>/page/{n}</html>".encode() in body
        return True

    def stored() -> list[str]:
        query = f"url={live_web}/page/&matchType=prefix&output=json"
        status, body = _get(port, f"/stored/index?{query}")
        assert status == 200
        return sorted(json.loads(line)["url"] for line in body.decode().splitlines())

    try:
        _wait_for("worker 0 recording and both answering", recorder_ready, proc, log)
        # Connections go to either worker; worker 1 forwards (a 503 until worker 0's
        # socket is up: it opens the store first).
        _wait_for("page 0 recorded", functools.partial(record, 0), proc, log)
        for n in range(1, 12):
            assert record(n)
        # Acks are asynchronous (the client does not wait for them): the kill
        # comes once the captures are in the store.
        _wait_for("12 captures stored", lambda: len(stored()) == 12, proc, log)
        first = _writer(gateway.workers(), lock)
        assert first is not None
        os.kill(first, signal.SIGKILL)

        def replaced() -> bool:
            return _writer(gateway.workers(), lock) not in (None, first)

        _wait_for("worker 0 replaced", replaced, proc, log)
        for n in range(12, 16):
            _wait_for(f"page {n} recorded", functools.partial(record, n), proc, log)
        _wait_for("16 captures stored", lambda: len(stored()) == 16, proc, log)
        assert stored() == sorted(f"{live_web}/page/{n}" for n in range(16))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT_S)


def _store_of_sample(sample_dir: Path, root: Path) -> None:
    """A store holding the sample archive's iana.warc.gz (imported by the store's own code)."""
    from gateway.store.settings import StoreSettings
    from gateway.store.store import Store

    async def add() -> None:
        async with await Store.open(StoreSettings(root=str(root), fsync="never")) as store:
            await store.add_warc(sample_dir / "warcs" / "iana.warc.gz")

    asyncio.run(add())


def test_workers_read_one_store_each_opening_it_shared(sample_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "archive"
    _store_of_sample(sample_dir, root)
    config = tmp_path / "collections.yaml"
    config.write_text(f"store:\n  root: {root}\ncollections:\n  s: $store\n")
    gateway = _start_two_workers(config, tmp_path)
    proc, port, log = gateway.proc, gateway.port, gateway.log
    index = str(root / "index.sqlite3")

    def both_opened_the_store() -> bool:
        workers = gateway.workers()
        return len(workers) == 2 and all(index in _open_paths(pid) for pid in workers)

    try:
        _wait_for("two workers with the store open", both_opened_the_store, proc, log)
        _wait_for("/_ready answering", lambda: _get(port, "/_ready")[0] == 200, proc, log)
        for _ in range(20):  # the kernel hands connections to either worker
            status, body = _get(port, "/s/index?url=http://www.iana.org/&limit=1")
            assert status == 200
            assert body.startswith(b"org,iana)/ 20140126200624 ")
            status, body = _get(port, "/s/resource?url=http://www.iana.org/&closest=20140126200624")
            assert status == 200
            assert body.startswith(b"WARC/1.0\r\n")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT_S)


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_bad_workers_value_is_a_usage_error(config: Path, value: str) -> None:
    done = _run_serve(config, "--workers", value)
    assert done.returncode == 2
    assert "--workers" in done.stderr
    assert "expected" in done.stderr


def test_a_busy_port_is_one_clear_error(config: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        done = _run_serve(config, "--port", str(port), "--workers", "2")
    assert done.returncode == 2  # as with one process (tests/test_cli.py)
    assert f"cannot listen on 127.0.0.1 port {port}" in done.stderr
    assert "Traceback" not in done.stderr
