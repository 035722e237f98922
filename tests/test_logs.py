"""``gateway serve`` logs: level, text or JSON lines, and aiohttp's access log."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from gateway.server.logs import configure_logging
from tests.conftest import _http_get, _Server, serve_sample_iana


def _lines_with(server: _Server, text: str, count: int) -> list[str]:
    """The server's stderr lines containing ``text``, once there are ``count`` (10 s at most)."""
    lines: list[str] = []
    for _ in range(200):
        lines = [line for line in server.stderr_path.read_text().splitlines() if text in line]
        if len(lines) >= count:
            break
        time.sleep(0.05)
    return lines


def test_json_logs_carry_the_access_log_fields(tmp_path: Path, sample_dir: Path) -> None:
    server, port = serve_sample_iana(tmp_path, sample_dir, "--log-format", "json", "--access-log")
    try:
        status, body = _http_get(port, "/iana/index?url=iana.org") or (0, b"")
        assert status == 200
        assert _http_get(port, "/iana/index?url=iana.org&limit=x") is not None
        lines = _lines_with(server, "/iana/index", 2)
    finally:
        server.stop()
    records = [json.loads(line) for line in lines]
    # Every line of standard error is one JSON object, the start-up line included.
    everything = [json.loads(line) for line in server.stderr_path.read_text().splitlines()]
    assert everything[0]["message"].startswith("serving iana on http://127.0.0.1:")
    ok, bad = records[-2:]
    assert ok["logger"] == "aiohttp.access"
    assert ok["level"] == "INFO"
    assert ok["first_request_line"] == "GET /iana/index?url=iana.org HTTP/1.1"
    assert ok["response_status"] == 200
    assert ok["response_size"] > len(body)  # aiohttp's %b counts the header block too
    assert ok["remote_address"] == "127.0.0.1"
    # Seconds as "%06f" of aiohttp's loop.time(): uvloop's clock moves once per
    # loop iteration (libuv's cached milliseconds), so a lookup answered
    # within one iteration logs 0.000000.
    assert re.fullmatch(r"\d+\.\d{6}", ok["request_time_frac"])
    assert ok["timestamp"].endswith("+00:00")
    assert bad["response_status"] == 400


def test_text_access_log_format_is_configurable(tmp_path: Path, sample_dir: Path) -> None:
    server, port = serve_sample_iana(tmp_path, sample_dir, "--access-log", "ACCESS %s %r")
    try:
        assert (_http_get(port, "/iana/index?url=iana.org") or (0,))[0] == 200
        lines = _lines_with(server, "ACCESS", 2)  # the readiness polls, then this one
    finally:
        server.stop()
    expected = "INFO aiohttp.access ACCESS 200 GET /iana/index?url=iana.org HTTP/1.1"
    assert lines[-1].endswith(expected)


def test_no_access_log_by_default_and_warning_level(tmp_path: Path, sample_dir: Path) -> None:
    server, port = serve_sample_iana(tmp_path, sample_dir, "--log-level", "warning")
    try:
        assert (_http_get(port, "/iana/index?url=iana.org") or (0,))[0] == 200
        assert (_http_get(port, "/nowhere/index?url=iana.org") or (0,))[0] == 404
    finally:
        server.stop()
    logged = server.stderr_path.read_text()
    assert "aiohttp.access" not in logged
    assert " INFO " not in logged


def test_configure_logging_replaces_its_handler(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    configure_logging("debug", "json")
    configure_logging("debug", "json")  # twice: still one line per record
    logging.getLogger("gateway.test").debug("probe %d", 7, extra={"source": "iana"})
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert (record["message"], record["source"], record["level"]) == ("probe 7", "iana", "DEBUG")
    with pytest.raises(ValueError, match="expected one of debug, info, warning, error"):
        configure_logging("loud")
    logging.getLogger().handlers.clear()
