"""``scripts/install-wabac`` without the network: an ``npm`` stand-in on ``PATH``.

The stand-in answers ``npm pack`` with a tarball the test made and logs each
call; everything else the script runs is real (tar, openssl, sha256sum). The
real download and its pinned sha512 are exercised by ``scripts/test``,
which runs the script before the tests (tests/e2e/test_replay_browser.py
uses that install).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "install-wabac"


def pinned_version() -> str:
    found = re.search(r"^VERSION=(\S+)$", SCRIPT.read_text(encoding="utf-8"), re.M)
    assert found is not None
    return found.group(1)


def package_tarball(path: Path, sw: bytes) -> Path:
    """An npm package tarball (``package/...``) holding the files the script keeps."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [
            ("package/dist/sw.js", sw),
            ("package/package.json", b'{"version": "0.0.0"}'),
            ("package/LICENSE.md", b"license"),
            ("package/README.md", b"readme"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def npm_calls(tmp_path: Path) -> Path:
    """The log of the stand-in's calls (one line each)."""
    return tmp_path / "npm-calls.log"


def run(tmp_path: Path, npm_calls: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    """The script, installing into ``dest``, with ``npm`` answering from ``tmp_path/offer.tgz``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    npm = bin_dir / "npm"
    npm.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> "{npm_calls}"\n'
        "[[ $1 == pack ]] || exit 1\n"
        f'cp "{tmp_path / "offer.tgz"}" "$PWD/webrecorder-wabac-{pinned_version()}.tgz"\n'
    )
    npm.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", str(SCRIPT), str(dest)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_tarball_other_than_the_pinned_one_is_refused(tmp_path: Path, npm_calls: Path) -> None:
    package_tarball(tmp_path / "offer.tgz", b"// not wabac.js\n")
    dest = tmp_path / "wabac"
    done = run(tmp_path, npm_calls, dest)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "does not match the pinned integrity" in done.stderr
    assert npm_calls.read_text().startswith(f"pack --silent @webrecorder/wabac@{pinned_version()}")
    assert not dest.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("wabac.")] == []


def test_an_intact_install_is_kept_and_a_damaged_one_is_fetched_again(
    tmp_path: Path, npm_calls: Path
) -> None:
    dest = tmp_path / "wabac"
    dest.mkdir()
    sw = b"// the installed service worker\n"
    (dest / "sw.js").write_bytes(sw)
    (dest / "INSTALLED").write_text(
        f"version={pinned_version()}\nsw_sha256={hashlib.sha256(sw).hexdigest()}\n"
    )
    package_tarball(tmp_path / "offer.tgz", b"// not wabac.js\n")

    done = run(tmp_path, npm_calls, dest)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"present in {dest}" in done.stdout
    assert not npm_calls.exists()

    (dest / "sw.js").write_bytes(sw + b"// changed\n")
    done = run(tmp_path, npm_calls, dest)
    assert npm_calls.read_text().count("pack") == 1  # asked again
    assert done.returncode == 1  # and the stand-in's tarball is refused
    assert (dest / "sw.js").read_bytes() == sw + b"// changed\n"  # nothing replaced
