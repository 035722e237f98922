"""The README's commands, run as written in a fresh copy of the checkout.

``tests/test_readme_examples.py`` runs the README's set-up step and every
``curl`` line of the documentation against a server it starts. Here:

- the install command of "Set-up on a fresh machine", in a new virtual
  environment made by the ``python3`` on ``PATH`` (pip reaches the package
  index as a user's does), then the ``gateway serve`` it ends with, on a free
  port instead of 8080, answering ``/_health`` and the default collection;
- "Serving your own WARC files", line by line, with ``gateway`` on ``PATH``
  (the README's ``. .venv/bin/activate``) and its ``gateway serve &`` started
  on a free port.

The test command itself (``scripts/test``) is what ``.ci/run`` runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, _http_get, _start_until_ready
from tests.e2e.support import get

README = REPO_ROOT / "README.md"


def _block_after(heading: str) -> list[str]:
    """The lines of the first ``sh`` block under ``heading`` in the README."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, heading
    return [line for line in block.group(1).splitlines() if line.strip()]


def _fresh_copy(root: Path) -> Path:
    """The checkout's tracked files (as in the working tree) in ``root/checkout``, with
    ``root/shared`` standing for ``../shared`` beside it."""
    checkout = root / "checkout"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        source = REPO_ROOT / name
        if source.is_file():
            target = checkout / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (root / "shared").symlink_to(REPO_ROOT.parent / "shared")
    return checkout


@pytest.mark.timeout(900)
def test_the_install_command_installs_and_serves_the_default_config(tmp_path: Path) -> None:
    (line,) = _block_after("## Set-up on a fresh machine")
    *install, serve = line.split(" && ")
    assert serve == ".venv/bin/gateway serve"
    checkout = _fresh_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run(
        ["bash", "-ec", " && ".join(install)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    def argv(port: int) -> list[str]:
        return [*serve.split(), "--port", str(port)]

    server, port = _start_until_ready(
        "installed-gateway", argv, checkout, lambda p: _http_get(p, "/_health") is not None, env
    )
    try:
        status, _, body = get(port, "/")
        assert status == 200
        assert b"web" in body  # the default collection
        assert get(port, "/web/index?url=example.com")[0] == 200  # empty: nothing indexed yet
    finally:
        server.stop()


def test_serving_your_own_warc_files_as_written(tmp_path: Path) -> None:
    lines = _block_after("## Serving your own WARC files")
    checkout = _fresh_copy(tmp_path)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    server = None
    try:
        for line in lines:
            command = line.split("  #", 1)[0].strip()
            if command == "gateway serve &":

                def argv(port: int) -> list[str]:
                    return ["gateway", "serve", "--port", str(port)]

                server, port = _start_until_ready(
                    "own-warcs", argv, checkout, lambda p: _http_get(p, "/_health") is not None, env
                )
                continue
            if command.startswith("curl "):
                assert server is not None, "the README curls before it serves"
                command = command.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
            done = subprocess.run(
                ["bash", "-ec", command],
                cwd=checkout,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, f"{command}\n{done.stderr}"
            if command.startswith("curl "):
                assert "com,example)/" in done.stdout  # the file's capture, served
    finally:
        if server is not None:
            server.stop()
