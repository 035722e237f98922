"""Real ``gateway serve`` and ``gateway worker`` processes for the jobs tests.

Each runs ``python -m gateway.cli ...`` from the test's directory with the
repository on ``PYTHONPATH`` (so ``tests.jobs.probe_plugin`` imports as a
plugin), its output in log files there, in a process group of its own that
:meth:`_Server.stop <tests.conftest._Server.stop>` ends with SIGTERM.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import pytest

from tests.conftest import REPO_ROOT, STARTUP_TIMEOUT_S, _Server, _start_until_ready

__all__ = [
    "READY_LINE",
    "Process",
    "get_json",
    "jobs_config",
    "run_env",
    "run_gateway",
    "start_serve",
    "start_worker",
]

Process = _Server

#: What a worker's or server's log says once its orchestrator runs.
READY_LINE: Final = "jobs: orchestrator running"


def run_env() -> dict[str, str]:
    """The environment of the child processes: the repository importable."""
    return dict(os.environ, PYTHONPATH=str(REPO_ROOT))


def run_gateway(
    *args: str, cwd: Path, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``python -m gateway.cli ARGS...`` run to its end (output captured as text)."""
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=cwd,
        env=run_env(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def jobs_config(root: Path, *, plugins: tuple[str, ...] = ("tests.jobs.probe_plugin",)) -> str:
    """A config with a store at ``root``, ``$store`` served, the probe plugin loaded."""
    plugin_list = ", ".join(plugins)
    return (
        f"store:\n  root: {root}\n  fsync: never\n"
        f"jobs:\n  plugins: [{plugin_list}]\n  poll_s: 0.2\n"
        "collections:\n  stored: $store\n"
    )


def _wait_for_line(process: Process, line: str, within_s: float = STARTUP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + within_s
    while line not in process.stderr_path.read_text("utf-8", errors="replace"):
        if process.proc.poll() is not None or time.monotonic() > deadline:
            process.stop()
            pytest.fail(f"{process.name} never logged {line!r}:\n{process.describe()}")
        time.sleep(0.05)


def start_worker(config: Path, workdir: Path, name: str = "worker") -> Process:
    """``gateway worker --config CONFIG``, returned once its orchestrator runs."""
    argv = [sys.executable, "-m", "gateway.cli", "worker", "--config", str(config)]
    process = _Server(name, argv, workdir, run_env())
    _wait_for_line(process, READY_LINE)
    return process


def _health(port: int) -> bool:
    try:
        status, _ = get_json(port, "/_health")
    except OSError:
        return False
    return status == 200


def start_serve(config: Path, workdir: Path, *, wait_for_jobs: bool = True) -> tuple[Process, int]:
    """``gateway serve --config CONFIG`` on a free port, once it answers (and runs its jobs)."""

    def argv(port: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gateway.cli",
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
        ]

    process, port = _start_until_ready("serve", argv, workdir, _health, run_env())
    if wait_for_jobs:
        _wait_for_line(process, READY_LINE)
    return process, port


def get_json(port: int, path: str, timeout_s: float = 10.0) -> tuple[int, Any]:
    """``GET path`` on 127.0.0.1:port: ``(status, decoded JSON body)``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()
