"""Progress bars of long commands (tqdm): drawn on a terminal, quiet in logs."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from gateway.cli import main

GATEWAY = [sys.executable, "-m", "gateway.cli"]


def _run_on_a_terminal(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``argv`` with standard error on a pseudo-terminal; its status and what it drew."""
    leader, follower = pty.openpty()
    # 24 rows, 100 columns: a fresh pseudo-terminal is 0 columns wide, too narrow to draw in.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower
        )
        os.close(follower)
        drawn = bytearray()
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            drawn += chunk
        status = proc.wait(timeout=120)
    finally:
        os.close(leader)
    return status, drawn.decode("utf-8", errors="replace")


def test_index_draws_a_bar_on_a_terminal(sample_dir: Path, tmp_path: Path) -> None:
    status, drawn = _run_on_a_terminal(
        [*GATEWAY, "index", str(sample_dir / "warcs" / "iana.warc.gz"), "-o", "iana.cdxj"],
        tmp_path,
    )
    assert status == 0, drawn
    size = (sample_dir / "warcs" / "iana.warc.gz").stat().st_size
    assert "gateway index: 100%" in drawn
    assert f"{size / 1024:.0f}k/{size / 1024:.0f}k" in drawn  # bytes, scaled by 1024
    assert "\r" in drawn  # redrawn in place


def test_index_is_quiet_when_not_on_a_terminal(sample_dir: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [*GATEWAY, "index", str(sample_dir / "warcs"), "-o", "all.cdxj"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # The sample holds a record that fails its digest on purpose, and bad.arc three
    # records whose length cannot be read: exit status 1.
    assert result.returncode == 1, result.stderr
    assert "%|" not in result.stderr
    assert result.stderr.rstrip().endswith("captures from 16 file(s); 4 problem(s), see above")


def test_forced_bars_of_store_add_check_and_repair(
    sample_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path / "store")
    warc = str(sample_dir / "warcs" / "example.warc.gz")
    assert main(["store", "add", "--root", root, "--progress", warc]) == 0
    out, err = capsys.readouterr()
    assert "example.warc.gz: added as warcs/example.warc.gz" in out
    assert "store add: 100%" in err
    assert main(["store", "check", "--root", root, "--progress"]) == 0
    assert "store check: 100%" in capsys.readouterr().err
    assert main(["store", "repair", "--root", root, "--progress"]) == 0
    err = capsys.readouterr().err
    assert "store repair: check: 100%" in err
    assert "store repair: final check: 100%" in err
    assert main(["store", "check", "--root", root, "--no-progress"]) == 0
    assert "%|" not in capsys.readouterr().err


def test_a_rejected_file_is_reported_beside_the_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.warc.gz"
    bad.write_bytes(b"this is not a WARC file\n")
    assert main(["store", "add", "--root", str(tmp_path / "store"), "--progress", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"gateway store add: {bad}: refused, nothing was changed:\n  " in err
    assert not (tmp_path / "store").exists()


def test_index_progress_counts_every_byte_and_changes_nothing(sample_dir: Path) -> None:
    import io

    from gateway.index.indexer import archive_files, write_cdxj_index

    inputs = [sample_dir / "warcs"]
    plain = io.StringIO()
    write_cdxj_index(inputs, plain)
    counted: list[int] = []
    watched = io.StringIO()
    write_cdxj_index(inputs, watched, progress=counted.append)
    # Watching the progress must not disturb post_append (POST bodies in the keys).
    assert watched.getvalue() == plain.getvalue()
    assert "__wb_method=post&foo=bar&test=abc" in plain.getvalue()
    assert all(n >= 0 for n in counted)
    assert sum(counted) == sum(p.stat().st_size for p in archive_files(inputs))
