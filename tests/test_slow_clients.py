"""Connections a client holds open: keep-alive, head and body timeouts, the connection cap.

The server is ``gateway.server.http_server`` (limits:
``gateway.server.connection_limits``) in a real ``gateway serve`` on
127.0.0.1, started with short timeouts (1 s) so that the attacks end fast,
or with long ones and a cap of :data:`CAP` connections for the flood tests.
Every attack runs while a thread polls ``/_health`` on fresh connections:
each poll must answer 200. Time bounds are lower bounds, or upper bounds
of 5 times the timeout; the log must hold no error and no traceback.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from aiohttp.web_protocol import RequestHandler

from gateway.cli import build_parser
from gateway.server.connection_limits import (
    PROBE_CONNECTIONS,
    ConnectionLimits,
    fit_to_open_files,
    open_files_limit,
    raise_open_files_limit,
)
from tests.conftest import _Server, serve_sample_iana

#: The short servers' timeouts (keep-alive, head, body).
TIMEOUT_S: Final = 1.0
#: The minimum body rate of the ``short`` server (bytes per second).
MIN_RATE_BPS: Final = 10
#: The longest a timeout may take to act, on a slow or loaded machine.
MARGIN_S: Final = 5 * TIMEOUT_S
#: The capped server's cap (its timeouts are long: only the cap closes connections).
CAP: Final = 4
#: How long a test waits for what must happen, at most (the limits act far sooner).
PATIENCE_S: Final = 30.0

#: A post-request (its body: a whole HTTP request), for a body of ``%d`` bytes.
_POSTREQ: Final = (
    b"POST /iana/postreq/index HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/http\r\nContent-Length: %d\r\n\r\n"
)
#: The wrapped request of a post-request.
_WRAPPED: Final = b"GET / HTTP/1.1\r\nHost: www.iana.org\r\n\r\n"


@dataclass(frozen=True)
class Gateway:
    server: _Server
    port: int


def _serve(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path, *options: str) -> Gateway:
    server, port = serve_sample_iana(tmp_path_factory.mktemp("slow-clients"), sample_dir, *options)
    return Gateway(server, port)


def _check_log(server: _Server) -> None:
    log = server.stderr_path.read_text()
    assert "Traceback" not in log
    assert " ERROR " not in log


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Iterator[int]:
    """The port of a ``gateway serve`` with 1 s keep-alive, head and body timeouts."""
    seconds = str(TIMEOUT_S)
    server = _serve(
        tmp_path_factory,
        sample_dir,
        *("--keepalive-timeout", seconds, "--head-timeout", seconds, "--body-timeout", seconds),
        *("--min-body-rate", str(MIN_RATE_BPS)),
        *("--log-level", "debug"),
    )
    try:
        yield server.port
    finally:
        server.server.stop()
    _check_log(server.server)


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory, sample_dir: Path) -> Iterator[Gateway]:
    """A ``gateway serve`` of at most :data:`CAP` connections, whose timeouts are 300 s."""
    server = _serve(
        tmp_path_factory,
        sample_dir,
        *("--keepalive-timeout", "300", "--head-timeout", "300", "--body-timeout", "300"),
        *("--max-connections", str(CAP)),
    )
    try:
        yield server
    finally:
        server.server.stop()
    _check_log(server.server)


# -- helpers ---------------------------------------------------------------------------


def _health(port: int) -> int | str:
    """``GET /_health`` on a new connection: the status, or what went wrong."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE_S)
    try:
        conn.request("GET", "/_health", headers={"Connection": "close"})
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException) as exc:
        return repr(exc)
    finally:
        conn.close()


@contextlib.contextmanager
def health_polled(port: int) -> Iterator[list[int | str]]:
    """Poll ``/_health`` every 0.1 s meanwhile; every poll must answer 200."""
    answers: list[int | str] = []
    stop = threading.Event()

    def poll() -> None:
        while True:
            answers.append(_health(port))
            if stop.wait(0.1):
                return

    thread = threading.Thread(target=poll, name="health-poller", daemon=True)
    thread.start()
    try:
        yield answers
    finally:
        stop.set()
        thread.join(PATIENCE_S)
    answers.append(_health(port))  # and once the attack is over
    assert len(answers) >= 2
    assert all(answer == 200 for answer in answers), answers


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=PATIENCE_S)


def _until_closed(sock: socket.socket, limit_s: float = PATIENCE_S) -> tuple[float, bytes]:
    """Read until the server closes ``sock``: (seconds it took, the bytes read).

    A reset counts as closed. Fails the test after ``limit_s``.
    """
    start = time.monotonic()
    deadline = start + limit_s
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            pytest.fail(f"still open after {limit_s:g} s; read {data[:200]!r}")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return time.monotonic() - start, data


def _is_open(sock: socket.socket) -> bool:
    """Whether the server has not closed ``sock`` (nothing to read, no end of file)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return True
    try:
        return bool(sock.recv(65536, socket.MSG_PEEK))
    except ConnectionResetError:
        return False


def _status(data: bytes) -> bytes:
    return data.split(b"\r\n", 1)[0]


def _timed_out(answers: list[bytes]) -> None:
    """Each closed connection's bytes are a 408 or nothing (a reset may eat the answer)."""
    assert all(a == b"" or _status(a) == b"HTTP/1.1 408 Request Timeout" for a in answers), answers
    assert any(answers), "no 408 at all"


# -- timeouts --------------------------------------------------------------------------


def test_idle_connections_are_closed_after_the_keepalive_timeout(short: int) -> None:
    with health_polled(short):
        fresh = [_connect(short) for _ in range(20)]
        opened = time.monotonic()
        kept = _connect(short)  # one answered request, then idle
        kept.sendall(b"GET /_health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert kept.recv(65536).startswith(b"HTTP/1.1 200 OK")
        answered = time.monotonic()
        for sock in fresh:
            with sock:
                _until_closed(sock, MARGIN_S)
        assert time.monotonic() - opened >= TIMEOUT_S / 2
        with kept:
            _waited, data = _until_closed(kept, MARGIN_S)
        assert data == b""
        assert time.monotonic() - answered >= TIMEOUT_S / 2


def test_a_slow_head_is_closed_with_a_408(short: int) -> None:
    """One header line at a time, each well within the timeout: the whole head is not."""
    answers = []
    with health_polled(short):
        socks = [_connect(short) for _ in range(5)]
        for sock in socks:
            sock.sendall(b"GET /_health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        lines = 0
        open_socks = list(socks)
        while open_socks:
            assert time.monotonic() - started < MARGIN_S, "a slow head still open"
            readable, _, _ = select.select(open_socks, [], [], TIMEOUT_S / 5)
            for sock in readable:
                answers.append(_until_closed(sock)[1])
                open_socks.remove(sock)
            lines += 1
            for sock in open_socks:
                with contextlib.suppress(OSError):  # closed meanwhile: read next round
                    sock.sendall(b"X-Slow-%d: 1\r\n" % lines)
        assert time.monotonic() - started >= TIMEOUT_S / 2
        for sock in socks:
            sock.close()
    _timed_out(answers)


def test_a_slow_body_is_closed_with_a_408(short: int) -> None:
    """A POST body sending one byte, then waiting longer than the body timeout."""
    body = _WRAPPED
    answers = []
    with health_polled(short):
        socks = [_connect(short) for _ in range(5)]
        for sock in socks:
            sock.sendall(_POSTREQ % len(body) + body[:1])
        sent = 1
        started = time.monotonic()
        open_socks = list(socks)
        while open_socks:
            assert time.monotonic() - started < MARGIN_S, "a slow body still open"
            readable, _, _ = select.select(open_socks, [], [], TIMEOUT_S * 2)
            for sock in readable:
                answers.append(_until_closed(sock)[1])
                open_socks.remove(sock)
            for sock in open_socks:  # nothing came in twice the timeout: one more byte
                with contextlib.suppress(OSError):
                    sock.sendall(body[sent : sent + 1])
                    started = time.monotonic()
            sent += 1
        for sock in socks:
            sock.close()
    _timed_out(answers)


def test_a_body_trickling_within_the_timeout_is_read_whole(short: int) -> None:
    """The body timeout is between reads: bytes 0.05 s apart (20 bytes/s, above the
    minimum rate) outlast it and are answered."""
    body = _WRAPPED
    with _connect(short) as sock:
        sock.sendall(_POSTREQ % len(body))
        started = time.monotonic()
        for byte in body:
            time.sleep(TIMEOUT_S / 20)
            sock.sendall(bytes([byte]))
        assert time.monotonic() - started > TIMEOUT_S
        assert _status(sock.recv(65536)) == b"HTTP/1.1 200 OK"


def test_a_body_trickling_below_the_minimum_rate_is_cut_off(short: int) -> None:
    """Bytes sent often enough for the body timeout (every TIMEOUT_S / 4) but slower
    than the minimum rate on average: 408 once the body timeout plus what its
    bytes earned at the minimum rate has passed, /_health answering throughout."""
    body = _WRAPPED + b"x" * 10_000
    answers = []
    with health_polled(short):
        socks = [_connect(short) for _ in range(3)]
        for sock in socks:
            sock.sendall(_POSTREQ % len(body))
        started = time.monotonic()
        open_socks = list(socks)
        sent = 0
        while open_socks:
            assert time.monotonic() - started < MARGIN_S * 4, "a slow body still open"
            readable, _, _ = select.select(open_socks, [], [], 0)
            for sock in readable:  # an answer, or the end: the server is done with it
                answers.append(_until_closed(sock)[1])
                open_socks.remove(sock)
            for sock in open_socks:
                with contextlib.suppress(OSError):
                    sock.sendall(body[sent : sent + 1])
            sent += 1
            time.sleep(TIMEOUT_S / 4)  # 4 bytes/s: under MIN_RATE_BPS, within the timeout
        elapsed = time.monotonic() - started
        for sock in socks:
            sock.close()
    assert elapsed >= TIMEOUT_S  # never before the body timeout
    _timed_out(answers)
    assert any(b"came slower than" in answer for answer in answers), answers


def test_a_body_shorter_than_its_content_length_is_closed_after_the_body_timeout(
    short: int,
) -> None:
    with health_polled(short):
        socks = [_connect(short) for _ in range(5)]
        for sock in socks:
            sock.sendall(_POSTREQ % 100 + _WRAPPED[:10])
        sent = time.monotonic()
        answers = []
        for sock in socks:
            with sock:
                answers.append(_until_closed(sock, MARGIN_S)[1])
        assert time.monotonic() - sent >= TIMEOUT_S / 2
    _timed_out(answers)
    for answer in answers:
        assert not answer or b"Connection: close" in answer
        assert not answer or b'{"message": "the request body stopped' in answer


# -- the connection cap ----------------------------------------------------------------


def test_idle_connections_past_the_cap_are_closed(capped: Gateway) -> None:
    """40 idle connections on a server of 4: the ones idle longest make room, /_health answers."""
    port = capped.port
    socks = []
    with health_polled(port):
        for _ in range(40):
            socks.append(_connect(port))
            time.sleep(0.01)
        deadline = time.monotonic() + PATIENCE_S
        while sum(map(_is_open, socks)) > CAP:
            assert time.monotonic() < deadline, f"{sum(map(_is_open, socks))} open"
            time.sleep(0.05)
        # The newest connections are the ones kept.
        assert _is_open(socks[-1])
        for sock in socks:
            sock.close()
    for _ in range(int(PATIENCE_S / 0.1)):
        if "at the limit of 4 client connections" in capped.server.stderr_path.read_text():
            break
        time.sleep(0.1)
    assert "idle connections closed to make room" in capped.server.stderr_path.read_text()


def test_busy_connections_at_the_cap_leave_probes_only(capped: Gateway) -> None:
    """With every slot busy (bodies awaited), others get a 503 while /_health answers."""
    port = capped.port
    busy = [_connect(port) for _ in range(CAP)]
    for sock in busy:
        sock.sendall(_POSTREQ % 100 + _WRAPPED[:10])
    time.sleep(0.2)
    with health_polled(port):
        for _ in range(10):
            with _connect(port) as sock:
                sock.sendall(b"GET /iana/index?url=iana.org HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                _waited, data = _until_closed(sock)
            assert data == b"" or _status(data) == b"HTTP/1.1 503 Service Unavailable", data
            assert data == b"" or b"Retry-After: 1" in data
        # Idle connections past the cap, more than the probes' room: probes still answer.
        idle = [_connect(port) for _ in range(PROBE_CONNECTIONS + 4)]
        time.sleep(0.2)
        assert _health(port) == 200
        for sock in idle:
            sock.close()
    for sock in busy:  # still held: only the cap acted on this server
        assert _is_open(sock)
        sock.close()


# -- the options -----------------------------------------------------------------------


def test_workers_get_the_limits(tmp_path: Path, sample_dir: Path) -> None:
    server, port = serve_sample_iana(
        tmp_path, sample_dir, "--workers", "2", "--keepalive-timeout", str(TIMEOUT_S)
    )
    try:
        socks = [_connect(port) for _ in range(6)]  # the kernel spreads them over both
        for sock in socks:
            with sock:
                _until_closed(sock, MARGIN_S)
    finally:
        server.stop()
    _check_log(server)


def test_serve_options_default_to_the_limits_defaults() -> None:
    args = build_parser().parse_args(["serve"])
    limits = ConnectionLimits(
        keepalive_timeout_s=args.keepalive_timeout_s,
        head_timeout_s=args.head_timeout_s,
        body_timeout_s=args.body_timeout_s,
        min_body_rate_bps=args.min_body_rate_bps,
        max_connections=args.max_connections,
    )
    assert limits == ConnectionLimits()
    assert limits.min_body_rate_bps == 500
    assert limits.keepalive_timeout_s == 15
    assert (limits.head_timeout_s, limits.body_timeout_s, limits.max_connections) == (10, 30, 1024)


@pytest.mark.parametrize(
    "option",
    [
        ["--keepalive-timeout", "0"],
        ["--head-timeout", "-1"],
        ["--body-timeout", "soon"],
        ["--max-connections", "0"],
        ["--max-connections", "1.5"],
    ],
)
def test_bad_limit_options_are_usage_errors(
    option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", *option])
    assert exit_info.value.code == 2
    assert option[0] in capsys.readouterr().err


def test_the_cap_fits_under_the_open_files_limit() -> None:
    assert raise_open_files_limit() == open_files_limit()
    limit = open_files_limit()
    assert limit is None or limit >= 256
    fitted = fit_to_open_files(ConnectionLimits(max_connections=10**6), 1000)
    assert fitted.max_connections + PROBE_CONNECTIONS < 1000 - 200
    assert fit_to_open_files(ConnectionLimits(max_connections=8), 1000).max_connections == 8
    assert fit_to_open_files(ConnectionLimits(), None) == ConnectionLimits()


def test_aiohttp_internals_the_server_relies_on() -> None:
    """``GatewayRequestHandler`` reads and overrides these (aiohttp 3.14)."""
    slots = {name for cls in RequestHandler.__mro__ for name in getattr(cls, "__slots__", ())}
    for name in (
        "_parser",
        "_waiter",
        "_current_request",
        "_request_handler",
        "_request_count",
        "_next_keepalive_close_time",
        "_keepalive_timeout",
        "_keepalive_handle",
        "_reading_paused",
        "_buffer_paused",
        "_force_close",
        "_close",
        "_upgraded",
    ):
        assert name in slots, name
    assert callable(RequestHandler._process_keepalive)
