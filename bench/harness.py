"""Shared machinery of the side-by-side benchmarks (gateway vs pywb 2.10).

Used by ``bench/bench_gateway.py`` and ``bench/bench_groups.py``; run those as
``python -m bench.bench_gateway`` from the repository root.

- :func:`machine` describes the machine (cores, CPU model, Python, versions).
- :func:`start_gateway` runs ``python -m gateway.cli serve`` (one process;
  uvloop when installed) on a config written to a temporary directory.
- :func:`start_pywb` runs pywb 2.10's ``WarcServer`` WSGI app from the peer
  virtualenv (``.peers/pywb``, made by ``scripts/install-peers``) under
  ``gevent.pywsgi.WSGIServer``, as ``warcserver`` does, through a small
  launcher that can set ``TCP_NODELAY`` on every accepted socket: stock pywb
  writes headers and body in separate small writes and, with Nagle's
  algorithm and delayed ACKs, stalls ~44 ms per keep-alive response
  (FIELD-NOTES). Its access log is off, as the gateway's is.
- :func:`run_wrk` drives ``wrk -t2 -cN -dS --latency`` with a Lua script
  rotating over a list of paths and returns req/s, p50 and p99 (ms), the
  error counts and the server's CPU use over the run.

Everything binds and connects to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
SAMPLE_DIR: Final = REPO_ROOT.parent / "shared" / "data" / "pywb-sample"
PYWB_PYTHON: Final = REPO_ROOT / ".peers" / "pywb" / "bin" / "python"
HOST: Final = "127.0.0.1"

STARTUP_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 10.0
_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")

#: Run by the pywb venv's python: argv = config.yaml, port, "nodelay"|"stock".
PYWB_LAUNCHER: Final = '''\
"""pywb 2.10 WarcServer under gevent's WSGIServer, optionally with TCP_NODELAY."""
from gevent.monkey import patch_all

patch_all()

import socket
import sys

from gevent.pywsgi import WSGIServer
from pywb.utils.geventserver import RequestURIWSGIHandler
from pywb.warcserver.warcserver import WarcServer

CONFIG, PORT, MODE = sys.argv[1], int(sys.argv[2]), sys.argv[3]


class NoDelayWSGIServer(WSGIServer):
    """Sets TCP_NODELAY on each accepted connection before handling it."""

    def handle(self, sock, address):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().handle(sock, address)


server_class = NoDelayWSGIServer if MODE == "nodelay" else WSGIServer
app = WarcServer(config_file=CONFIG)
server = server_class(("127.0.0.1", PORT), app, handler_class=RequestURIWSGIHandler, log=None)
print("pywb-launcher: serving on 127.0.0.1:%d (%s)" % (PORT, MODE), file=sys.stderr, flush=True)
server.serve_forever()
'''

_WRK_LUA: Final = """\
local paths = {%(paths)s}
local close = %(close)s
local i = %(start)d

init = function(args)
  if close then
    wrk.headers["Connection"] = "close"
  end
  if #paths == 1 then
    wrk.path = paths[1]
  end
end

if #paths > 1 then
  request = function()
    i = (i %% #paths) + 1
    return wrk.format("GET", paths[i])
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %%d, "duration_us": %%d, "bytes": %%d, "p50_us": %%d, ' ..
    '"p99_us": %%d, "status": %%d, "connect": %%d, "read": %%d, "write": %%d, ' ..
    '"timeout": %%d}\\n',
    summary.requests, summary.duration, summary.bytes, latency:percentile(50),
    latency:percentile(99), e.status, e.connect, e.read, e.write, e.timeout))
end
"""


# -- the machine -------------------------------------------------------------------


def _cpu_model() -> str:
    """``model name`` and ``cpu MHz`` of the first CPU in /proc/cpuinfo."""
    model, mhz = "", ""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and not model:
                model = value.strip()
            elif name.strip() == "cpu MHz" and not mhz:
                mhz = f", {float(value):.0f} MHz"
    return (model or platform.processor() or "unknown") + mhz


def _version_of(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def code_version() -> str:
    """``git`` HEAD of the repository, and how many files under gateway/ differ from it;
    for a tree that is not a checkout (a ``git archive`` of a commit, how a run
    keeps measuring one version while work goes on), ``GATEWAY_BENCH_CODE``
    names it, else ``not a git checkout``."""
    if not (REPO_ROOT / ".git").exists():
        return os.environ.get("GATEWAY_BENCH_CODE", "not a git checkout")
    head = _version_of(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"])
    try:
        status = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "gateway"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return head
    changed = len(status.splitlines())
    return f"{head}" + (f" + {changed} uncommitted file(s) under gateway/" if changed else "")


def machine() -> dict[str, str]:
    """The machine and software a run was made on, for the report (str -> str)."""
    try:
        loop = f"uvloop {metadata.version('uvloop')}"
    except metadata.PackageNotFoundError:
        loop = "asyncio (uvloop not installed)"

    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": f"{os.cpu_count()} (nproc {len(os.sched_getaffinity(0))})",
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "code": code_version(),
        "gateway": f"aiohttp {metadata.version('aiohttp')}, {loop}",
        "pywb": _version_of(
            [
                str(PYWB_PYTHON),
                "-c",
                "import pywb.version as v, gevent; "
                "print('pywb', v.__version__, 'gevent', gevent.__version__)",
            ]
        ),
        "wrk": _version_of(["wrk", "--version"]).split(" Copyright")[0],
    }


def print_machine(info: dict[str, str]) -> None:
    """Print the machine description, one ``key: value`` per line."""
    for key, value in info.items():
        print(f"# {key}: {value}")


# -- servers -----------------------------------------------------------------------


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 when this returned."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def http_get(port: int, path: str, timeout_s: float = 5.0) -> tuple[int, bytes] | None:
    """Status and body of ``GET path`` on 127.0.0.1:port, or None if nothing answers."""
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


class Server:
    """A child process in its own process group, output to log files in ``workdir``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        workdir: Path,
        port: int,
        *,
        startup_timeout_s: float = STARTUP_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.port = port
        self.argv = list(argv)
        self.startup_timeout_s = startup_timeout_s
        self.log_path = workdir / f"{name}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO_ROOT)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def cpu_s(self) -> float:
        """User + system CPU seconds used so far by the process (all its threads) and
        its live child processes (``--workers``)."""
        pid = self.proc.pid
        pids = [pid]
        with contextlib.suppress(OSError):
            pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        total = 0
        for one in pids:
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
        return total / _CLK_TCK

    def wait_ready(self, ready: Callable[[int], bool]) -> None:
        """Wait until ``ready(port)``; raise RuntimeError with the log when it never is."""
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if ready(self.port):
                return
            time.sleep(0.1)
        log = self.log_path.read_text("utf-8", errors="replace")[-3000:]
        self.stop()
        raise RuntimeError(f"{self.name} did not start: {' '.join(self.argv)}\n{log}")

    def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after STOP_TIMEOUT_S."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)


def start_gateway(
    config_yaml: str,
    workdir: Path,
    name: str = "gateway",
    *,
    prefix: Sequence[str] = (),
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
    workers: int = 1,
    access_log: bool = False,
) -> Server:
    """``python -m gateway.cli serve`` on a free port; ready when ``/_health`` answers 200.

    ``prefix`` is put before the command (``valgrind --tool=callgrind ...``);
    ``workers`` above 1 adds ``--workers N``; ``access_log`` turns the
    gateway's access log on (off by default, as pywb runs here with
    ``log=None``).
    """
    config = workdir / f"{name}.yaml"
    config.write_text(config_yaml, "utf-8")
    port = free_port()
    argv = [*prefix, sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
    argv += ["--host", HOST, "--port", str(port)]
    if workers > 1:
        argv += ["--workers", str(workers)]
    if access_log:
        argv.append("--access-log")
    server = Server(name, argv, workdir, port, startup_timeout_s=startup_timeout_s)
    server.wait_ready(lambda p: (http_get(p, "/_health") or (0, b""))[0] == 200)
    return server


def fetch_answer(port: int, path: str, timeout_s: float = 10.0) -> dict[str, object]:
    """The answer to ``GET path`` as :mod:`bench.floor` replays it (type, body, encoding).

    Raises RuntimeError unless the answer is a 200.
    """
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: status {response.status}: {body[:300]!r}")
        headers = {}
        if response.getheader("Content-Encoding"):
            headers["Content-Encoding"] = response.getheader("Content-Encoding")
        return {
            "content_type": response.getheader("Content-Type") or "application/octet-stream",
            "body_hex": body.hex(),
            "headers": headers,
        }
    finally:
        conn.close()


def start_floor(
    answers: dict[str, dict[str, object]],
    workdir: Path,
    name: str = "floor",
    *,
    prefix: Sequence[str] = (),
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
) -> Server:
    """The bare aiohttp floor (:mod:`bench.floor`) replaying ``answers``, on a free port."""
    path = workdir / f"{name}-answers.json"
    path.write_text(json.dumps(answers), "utf-8")
    port = free_port()
    argv = [*prefix, sys.executable, "-m", "bench.floor", str(path), str(port)]
    server = Server(name, argv, workdir, port, startup_timeout_s=startup_timeout_s)
    server.wait_ready(lambda p: (http_get(p, "/_health") or (0, b""))[0] == 200)
    return server


def start_pywb(
    config: dict[str, object],
    workdir: Path,
    *,
    nodelay: bool = True,
    name: str = "pywb",
    prefix: Sequence[str] = (),
    startup_timeout_s: float = STARTUP_TIMEOUT_S,
) -> Server:
    """pywb 2.10 ``WarcServer`` on a free port; ready when ``/`` lists every collection.

    ``config`` is pywb's config.yaml as a dict (written as JSON, which is YAML);
    ``prefix`` is put before the command. Raises RuntimeError when the pywb
    peer is not installed.
    """
    if not PYWB_PYTHON.exists():
        raise RuntimeError(f"pywb peer missing at {PYWB_PYTHON}: run bash scripts/install-peers")
    launcher = workdir / "pywb_launcher.py"
    launcher.write_text(PYWB_LAUNCHER, "utf-8")
    config_path = workdir / f"{name}.yaml"
    config_path.write_text(json.dumps(config, indent=2) + "\n", "utf-8")
    port = free_port()
    mode = "nodelay" if nodelay else "stock"
    argv = [*prefix, str(PYWB_PYTHON), str(launcher), str(config_path), str(port), mode]
    server = Server(name, argv, workdir, port, startup_timeout_s=startup_timeout_s)
    colls = config.get("collections")
    wanted = [f"/{c}" for c in colls] if isinstance(colls, dict) else []

    def ready(port: int) -> bool:
        answer = http_get(port, "/")
        if answer is None or answer[0] != 200:
            return False
        with contextlib.suppress(ValueError):
            routes = json.loads(answer[1])
            return isinstance(routes, dict) and all(c in routes for c in wanted)
        return False

    server.wait_ready(ready)
    return server


# -- load --------------------------------------------------------------------------


def system_busy_s() -> float:
    """CPU seconds all cores have spent busy (not idle, not iowait) since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / _CLK_TCK


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_quiet(max_wait_s: float, busy_below: float = 0.15, window_s: float = 1.0) -> float:
    """Wait until the machine's other load is under ``busy_below`` cores over ``window_s``.

    Other engineers' test runs share this machine; a run under their load
    says little. Gives up after ``max_wait_s`` and returns the last busy
    level (cores), so the caller can report it.
    """
    deadline = time.monotonic() + max_wait_s
    while True:
        before = system_busy_s()
        time.sleep(window_s)
        busy = (system_busy_s() - before) / window_s
        if busy < busy_below or time.monotonic() >= deadline:
            return busy


def ensure_wrk() -> str:
    """Path of ``wrk``; installs the Debian package when missing and running as root.

    Raises RuntimeError saying how to install it otherwise.
    """
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=False)
        found = shutil.which("wrk")
        if found:
            return found
    raise RuntimeError("wrk is not installed: apt-get install -y wrk")


@dataclass(frozen=True, slots=True)
class WrkResult:
    """One wrk run: throughput, client-side latency percentiles, errors, server CPU."""

    requests: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    mb_per_s: float
    #: Counts of non-2xx/3xx answers ("status") and socket errors ("connect",
    #: "read", "write", "timeout"); zero counts left out.
    errors: dict[str, int]
    #: Server CPU seconds per wall second over the run (1.0 = one core busy).
    server_cpu: float
    #: wrk's own CPU seconds per wall second.
    wrk_cpu: float
    #: CPU used by every other process on the machine, per wall second.
    other_cpu: float

    def errors_note(self) -> str:
        """`` (3 read errors)``-style suffix, or "" when there were none."""
        if not self.errors:
            return ""
        return " (" + ", ".join(f"{n} {kind} errors" for kind, n in self.errors.items()) + ")"


def run_wrk(
    server: Server,
    paths: Sequence[str],
    *,
    connections: int,
    duration_s: float,
    workdir: Path,
    threads: int = 2,
    close: bool = False,
) -> WrkResult:
    """``wrk -t{threads} -c{connections} -d{duration_s}s --latency`` against ``server``.

    Each request takes the next of ``paths`` in turn (per wrk thread); with
    ``close`` every request carries ``Connection: close``. Latency is measured
    by wrk from request write to full response (ms).
    """
    lua = workdir / "wrk.lua"
    quoted = ", ".join(json.dumps(p) for p in paths)
    lua.write_text(
        _WRK_LUA % {"paths": quoted, "close": "true" if close else "false", "start": 0},
        "utf-8",
    )
    seconds_arg = f"-d{max(1, round(duration_s))}s"  # wrk takes whole seconds
    argv = [ensure_wrk(), f"-t{threads}", f"-c{connections}", seconds_arg, "--latency"]
    argv += ["--timeout", "10s", "-s", str(lua), server.base + paths[0]]
    cpu_before, busy_before, wrk_before = server.cpu_s(), system_busy_s(), _children_cpu_s()
    wall_before = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.monotonic() - wall_before
    server_cpu = (server.cpu_s() - cpu_before) / wall
    wrk_cpu = (_children_cpu_s() - wrk_before) / wall
    busy = (system_busy_s() - busy_before) / wall
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    stats = json.loads(line.removeprefix("WRKJSON "))
    seconds = stats["duration_us"] / 1e6
    kinds = ("status", "connect", "read", "write", "timeout")
    errors = {kind: stats[kind] for kind in kinds if stats[kind]}
    return WrkResult(
        requests=stats["requests"],
        requests_per_s=stats["requests"] / seconds,
        p50_ms=stats["p50_us"] / 1000,
        p99_ms=stats["p99_us"] / 1000,
        mb_per_s=stats["bytes"] / seconds / 1e6,
        errors=errors,
        server_cpu=server_cpu,
        wrk_cpu=wrk_cpu,
        other_cpu=max(0.0, busy - server_cpu - wrk_cpu),
    )


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table (first column left-aligned, others right)."""
    align = ["---"] + ["--:"] * (len(header) - 1)
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
