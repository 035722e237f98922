"""Commands that fail cleanly: serve on a busy port, check-config, duplicate keys."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import parse_config
from gateway.errors import ConfigError


def test_serve_on_a_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "collections.yaml"
    config.write_text(f"collections:\n  c:\n    index: {tmp_path}/indexes/\n")
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config),
             "--host", "127.0.0.1", "--port", str(port)],
            capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
        )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"cannot listen on 127.0.0.1 port {port}" in lines[0]
    assert "serving" not in done.stderr
    assert "Traceback" not in done.stderr


def test_check_config_changes_nothing_on_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "collections.yaml"
    config.write_text(
        "collections:\n  web:\n    index: ./archive/indexes/\n    resource: ./archive/warcs/\n"
    )
    before = sorted(tmp_path.rglob("*"))
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        status = main(["check-config", str(config)])
    finally:
        os.chdir(cwd)
    out, err = capsys.readouterr()
    assert status == 0, err
    assert sorted(tmp_path.rglob("*")) == before
    assert "index directory" in err
    assert "resource directory" in err
    assert err.count("does not exist; gateway serve creates it") == 2
    assert "web (collection)" in out


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("collections:\n  a: ./x.cdxj\n  b: ./y.cdxj\n  a: ./z.cdxj\n", "lines 2 and 4"),
        ("collections:\n  a:\n    index: ./x/\n    timeout: 1\n    timeout: 2\n", "lines 4 and 5"),
        ("collections: {a: ./x.cdxj, a: ./y.cdxj}\n", "lines 1 and 1"),
    ],
)
def test_a_duplicate_key_is_an_error_naming_both_lines(text: str, lines: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert "duplicate key" in info.value.message
    assert lines in info.value.message


def test_check_config_reports_a_duplicate_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("collections:\n  web: ./a.cdxj\n  web: ./b.cdxj\n")
    assert main(["check-config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "duplicate key 'web' at lines 2 and 3" in err
