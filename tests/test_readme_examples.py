"""Every curl example of the documentation runs, as written, against what its set-up gives.

The documentation is ``README.md`` and every page under ``docs/``. The
README's own commands are run: its set-up step that indexes the sample
archive into the default collection (the ``sh`` block that copies
``../shared/data/pywb-sample/`` and runs ``gateway index``), then ``gateway
serve`` on the default ``collections.yaml``, in a fresh copy of the checkout
(``.venv/bin/gateway`` is this test's Python). Then each ``curl`` line of
every ``sh`` block of every page is run with bash (``\\``-continued lines joined, the
block's ``printf`` lines run first, port 8080 replaced by the test
server's), and its HTTP status checked: the status a trailing comment names
(``# 400``, ``# 302 to ...``), else 200. A line with a pipe must exit 0 and
print something. An answer a page shows (a plain block starting
``HTTP/1.1`` right after an ``sh`` block) is compared with the real answer
to that block's last ``curl``: its status line, and each header line written
in full (no ``...``; a wrapped ``Link`` is left out).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from tests.conftest import REPO_ROOT, _http_get, _start_until_ready

README: Final = REPO_ROOT / "README.md"
DOCS: Final = REPO_ROOT / "docs"
_STATUS_COMMENT = re.compile(r"#\s*(\d{3})\b")
_MARK: Final = "__status__"


def documentation_pages() -> list[Path]:
    """``README.md`` and every ``docs/*.md`` page, in a fixed order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def _where(page: Path, line: int) -> str:
    return f"{page.relative_to(REPO_ROOT)}:{line}"


@dataclass(frozen=True, slots=True)
class Example:
    page: Path
    line: int
    command: str
    expected: int
    setup: tuple[str, ...]


def sh_blocks(text: str) -> Iterator[list[tuple[int, str]]]:
    """The ``(line number, command)`` of every ``sh`` block, ``\\``-continued lines joined."""
    for match in re.finditer(r"^```sh\n(.*?)^```", text, re.S | re.M):
        number = text.count("\n", 0, match.start()) + 2
        joined: list[tuple[int, str]] = []
        pending, start = "", number
        for offset, raw in enumerate(match.group(1).splitlines()):
            if not pending:
                start = number + offset
            if raw.endswith("\\"):
                pending += raw[:-1] + " "
                continue
            joined.append((start, pending + raw))
            pending = ""
        yield joined


def _split_comment(line: str) -> tuple[str, str]:
    """``(command, comment)``: the comment is what follows a ``#`` outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip(), line[i:]
    return line.rstrip(), ""


def curl_examples(page: Path) -> list[Example]:
    examples = []
    for lines in sh_blocks(page.read_text("utf-8")):
        setup = tuple(line for _, line in lines if line.startswith("printf "))
        for number, line in lines:
            if not line.startswith("curl "):
                continue
            command, comment = _split_comment(line)
            status = _STATUS_COMMENT.match(comment)
            expected = int(status[1]) if status else 200
            examples.append(Example(page, number, command, expected, setup))
    return examples


def all_curl_examples() -> list[Example]:
    """The curl examples of every page of the documentation."""
    return [example for page in documentation_pages() for example in curl_examples(page)]


def setup_block(text: str) -> list[str]:
    """The README's step that indexes the sample archive into the default collection."""
    for lines in sh_blocks(text):
        if any(line.startswith("cp ../shared/data/pywb-sample/") for _, line in lines):
            return [line for _, line in lines]
    pytest.fail("README.md has no set-up step indexing ../shared/data/pywb-sample")


@pytest.fixture(scope="module")
def readme_gateway(
    tmp_path_factory: pytest.TempPathFactory, sample_dir: Path
) -> Iterator[tuple[Path, int]]:
    """A fresh copy of the checkout after the README's set-up, served on a free port."""
    root = tmp_path_factory.mktemp("readme")
    (root / "shared" / "data").mkdir(parents=True)
    (root / "shared" / "data" / "pywb-sample").symlink_to(sample_dir)
    checkout = root / "checkout"
    (checkout / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "collections.yaml", checkout)
    gateway = checkout / ".venv" / "bin" / "gateway"
    gateway.write_text(f'#!/bin/sh\nexec {sys.executable} -m gateway.cli "$@"\n')
    gateway.chmod(0o755)
    for command in setup_block(README.read_text("utf-8")):
        result = subprocess.run(
            ["bash", "-ec", command], cwd=checkout, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, f"{command}\n{result.stderr}"

    def argv(port: int) -> list[str]:
        return [str(gateway), "serve", "--port", str(port)]

    server, port = _start_until_ready(
        "readme-gateway", argv, checkout, lambda p: _http_get(p, "/_health") is not None
    )
    try:
        yield checkout, port
    finally:
        server.stop()


def test_the_documentation_has_curl_examples_with_statuses() -> None:
    examples = all_curl_examples()
    assert len(examples) >= 30
    assert {400, 302, 204} <= {example.expected for example in examples}


def test_every_curl_example_answers_as_documented(readme_gateway: tuple[Path, int]) -> None:
    checkout, port = readme_gateway
    failures = []
    for example in all_curl_examples():
        for command in example.setup:
            subprocess.run(["bash", "-c", command], cwd=checkout, check=True, timeout=30)
        command = example.command.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        piped = "|" in command
        if not piped:
            command += f" -o /dev/null -w '{_MARK}%{{http_code}}'"
        result = subprocess.run(
            ["bash", "-c", command], cwd=checkout, capture_output=True, text=True, timeout=60
        )
        if piped:
            ok = result.returncode == 0 and result.stdout.strip() != ""
            got = f"exit {result.returncode}, {len(result.stdout)} characters"
        else:
            status = result.stdout.rsplit(_MARK, 1)[-1]
            ok = status == str(example.expected)
            got = f"status {status}"
        if not ok:
            failures.append(f"{_where(example.page, example.line)}: {example.command}\n    {got}")
    assert not failures, "\n".join(failures)


def shown_answers(page: Path) -> list[tuple[str, str, list[str]]]:
    """``(where, last curl of the sh block, shown lines)`` for each answer a page shows."""
    text = page.read_text("utf-8")
    found = []
    pattern = r"^```sh\n(.*?)^```\n\n```\n(HTTP/1\.1 .*?)^```"
    for match in re.finditer(pattern, text, re.S | re.M):
        block = "\n".join(match.group(1).splitlines()).replace("\\\n", " ")
        curls = [line for line in block.splitlines() if line.startswith("curl ")]
        number = text.count("\n", 0, match.start(2)) + 1
        found.append(
            (_where(page, number), _split_comment(curls[-1])[0], match.group(2).splitlines())
        )
    return found


def test_answers_shown_in_the_documentation_are_the_real_ones(
    readme_gateway: tuple[Path, int],
) -> None:
    checkout, port = readme_gateway
    shown = [answer for page in documentation_pages() for answer in shown_answers(page)]
    assert len(shown) >= 2
    failures = []
    for where, curl, lines in shown:
        base = f"127.0.0.1:{port}"
        command = curl.replace("127.0.0.1:8080", base) + " -s -o /dev/null -D -"
        real = subprocess.run(
            ["bash", "-c", command], cwd=checkout, capture_output=True, text=True, timeout=60
        ).stdout.replace(base, "127.0.0.1:8080")
        real_lines = [line.rstrip("\r") for line in real.splitlines()]
        for line in lines:
            if line.startswith(" ") or "..." in line or line.rstrip().endswith(","):
                continue
            if line not in real_lines:
                failures.append(f"{where}: {curl}\n    shown: {line}")
    assert not failures, "\n".join(failures)
