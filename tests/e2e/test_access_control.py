"""Access control as docs/access-control.md configures it, relative paths and all.

A temporary working directory gets the page's config as written
(``acl_paths: ./acl/``, ``./archive/indexes/``), the sample's ``iana.cdxj``
and WARCs; the page's ``bash`` block is run line by line: its ``gateway acl``
commands with the installed ``gateway``, its ``curl`` lines against a
``gateway serve`` started there, each answer's status checked against the
line's ``# NNN`` comment (else 200). Then the rules change under the running
server (``gateway acl add``, then a broken file), and a broken file stops the
next start-up with its path and line.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

from tests.e2e.support import GATEWAY, gateway, get, serve, until

DOCS = Path(__file__).resolve().parents[2] / "docs" / "access-control.md"


def _block(kind: str) -> str:
    block = re.search(rf"```{kind}\n(.*?)```", DOCS.read_text("utf-8"), re.S)
    assert block is not None, f"docs/access-control.md has a {kind} block"
    return block.group(1)


def _workdir(tmp_path: Path, sample_dir: Path) -> Path:
    (tmp_path / "collections.yaml").write_text(_block("yaml"))
    (tmp_path / "archive" / "indexes").mkdir(parents=True)
    shutil.copy(sample_dir / "cdxj" / "iana.cdxj", tmp_path / "archive" / "indexes")
    (tmp_path / "archive" / "warcs").mkdir()
    shutil.copy(sample_dir / "warcs" / "iana.warc.gz", tmp_path / "archive" / "warcs")
    (tmp_path / "acl").mkdir()
    return tmp_path


def _curl(line: str, port: int, cwd: Path) -> int:
    command = line.split("  #")[0].strip().replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    result = subprocess.run(
        ["bash", "-c", f"{command} -o /dev/null -w '%{{http_code}}'"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return int(result.stdout[-3:])


def _answers(line: str, port: int, cwd: Path, status: int) -> bool:
    return _curl(line, port, cwd) == status


def test_the_documented_rules_commands_and_answers(tmp_path: Path, sample_dir: Path) -> None:
    work = _workdir(tmp_path, sample_dir)
    lines = [line for line in _block("bash").splitlines() if line.strip()]
    server, port = serve(work)
    try:
        for line in lines:
            if line.startswith("gateway "):
                done = subprocess.run(
                    ["bash", "-c", line.replace("gateway ", f"{GATEWAY} ", 1)],
                    cwd=work,
                    capture_output=True,
                    text=True,
                    timeout=120,
                    check=False,
                )
                assert done.returncode == 0, (line, done.stdout, done.stderr)
                continue
            assert line.startswith("curl "), line
            want = re.search(r"#\s*(\d{3})\b", line)
            status = int(want[1]) if want else 200
            # the rules just written are in force within a second (reloaded)
            until(line, functools.partial(_answers, line, port, work, status))
        status, _, body = get(port, "/web/index?url=http://www.iana.org/about")
        assert status == 200
        assert b'"access": "block"' in body
        status, _, body = get(port, "/web/resource?url=http://www.iana.org/about")
        assert (status, body) == (
            451,
            b'{"message": "Withdrawn at the owner\'s request", "access": "block"}',
        )
        # a rule added while serving is in force without a restart
        added = gateway(["acl", "add", "web", "http://www.iana.org/about", "exclude"], work)
        assert added.returncode == 0, added.stderr
        until(
            "the new rule is in force",
            lambda: get(port, "/web/resource?url=http://www.iana.org/about")[0] == 404,
        )
        # a broken file: the last good rules stay, and an ERROR names the file and line
        rules = work / "acl" / "access-rules.aclj"
        good = rules.read_text()
        rules.write_text(good + 'org,iana)/ - {"access": "hide"}\n')
        until(  # each lookup may look at the files (at most once a second)
            "the reload failure is logged",
            lambda: (
                get(port, "/web/index?url=iana.org")[0] == 200
                and "access rules not reloaded" in server.logs()
            ),
        )
        assert "ERROR" in server.logs()
        assert "acl/access-rules.aclj line" in server.logs()
        assert get(port, "/web/resource?url=http://www.iana.org/about")[0] == 404
        assert get(port, "/web/resource?url=http://www.iana.org/")[0] == 200
    finally:
        server.stop()
    started = gateway(["serve", "--port", "0"], work, timeout_s=120)
    assert started.returncode == 2, (started.stdout, started.stderr)
    number = len(good.splitlines()) + 1
    assert f"collections.web.acl_paths: {rules} line {number}: access 'hide'" in started.stderr
