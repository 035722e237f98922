"""``gateway serve`` logs: level, text or JSON lines, aiohttp's access log, and
identical lines rate-limited (:class:`~gateway.server.logrepeat.RepeatFilter`)."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.server.logrepeat import RepeatFilter
from gateway.server.logs import configure_logging
from tests.conftest import _http_get, _Server, _start_until_ready, serve_sample_iana


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
    assert any(e["message"].startswith("serving iana on http://127.0.0.1:") for e in everything)
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


# ------------------------------------------------ identical lines rate-limited (issue 21 §2)
def _record(message: str, created: float, level: int = logging.ERROR, name: str = "g") -> Any:
    record = logging.LogRecord(name, level, __file__, 1, message, None, None)
    record.created = created
    return record


def test_identical_messages_pass_once_per_interval_with_a_count() -> None:
    repeat = RepeatFilter(interval_s=10.0)
    passed = [repeat.filter(_record("source down", t)) for t in (0.0, 1.0, 2.0, 9.9)]
    assert passed == [True, False, False, False]
    # Another message, another level or logger: not the same message.
    assert repeat.filter(_record("source up", 3.0))
    assert repeat.filter(_record("source down", 3.0, level=logging.WARNING))
    assert repeat.filter(_record("source down", 3.0, name="other"))
    later = _record("source down", 10.5)
    assert repeat.filter(later)
    assert later.getMessage() == "source down [3 identical messages not logged in the last 10 s]"
    assert later.repeats_suppressed == 3
    again = _record("source down", 21.0)
    assert repeat.filter(again)
    assert again.getMessage() == "source down"  # nothing was dropped in between


def test_the_access_log_and_debug_records_are_never_held_back() -> None:
    repeat = RepeatFilter(interval_s=10.0)
    access = [_record('127.0.0.1 "GET /_ready HTTP/1.1" 200', 1.0, logging.INFO, "aiohttp.access")]
    assert all(repeat.filter(access[0]) for _ in range(5))
    assert all(repeat.filter(_record("step", 1.0, logging.DEBUG)) for _ in range(5))


def test_the_filter_forgets_the_oldest_messages_past_its_bound() -> None:
    repeat = RepeatFilter(interval_s=10.0, max_messages=100)
    for n in range(1000):
        assert repeat.filter(_record(f"message {n}", 1.0))
    assert len(repeat._seen) <= 100
    assert not repeat.filter(_record("message 999", 2.0))  # the latest are remembered


def test_a_served_broken_record_logs_one_line_not_one_per_request(
    tmp_path: Path, sample_dir: Path
) -> None:
    """``gateway serve`` asked 30 times for a capture that is a record whose length
    cannot be read (warcio's ``bad.arc``): 30 answers of 502, one ERROR line."""
    index = tmp_path / "bad.cdxj"
    index.write_text(
        'com,example)/ 20140401000000 {"url": "http://example.com/", "length": "67", '
        '"offset": "134", "filename": "bad.arc"}\n'
    )
    config = tmp_path / "collections.yaml"
    config.write_text(f"collections:\n  w:\n    index: {index}\n    resource: {sample_dir}/warcs/")

    def argv(port: int) -> list[str]:
        serve = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]
        return [*serve, "--port", str(port)]

    server, port = _start_until_ready(
        "gateway", argv, tmp_path, lambda p: _http_get(p, "/_health") is not None
    )
    try:
        for _ in range(30):
            status, body = _http_get(port, "/w/resource?url=http://example.com/") or (0, b"")
            assert status == 502, body
            assert b"'bad.arc' offset 134" in body
    finally:
        server.stop()
    errors = [line for line in server.stderr_path.read_text().splitlines() if " ERROR " in line]
    # One a 10 s interval: the first, and one more only on a very slow machine.
    assert 1 <= len(errors) <= 2, errors
    assert "-> 502: no capture of http://example.com/ could be loaded" in errors[0]
