"""``gateway acl`` as a user runs it: a config with relative ``acl_paths`` in a
temporary working directory, the installed command in a subprocess."""

from __future__ import annotations

from pathlib import Path

from gateway.access.rules import read_rule_files
from tests.e2e.support import gateway

CONFIG = """\
collections:
  web:
    index: ./indexes/
    acl_paths: [./acl/rules.aclj, ./more/]
    default_access: block
"""


def _work(tmp_path: Path) -> Path:
    (tmp_path / "collections.yaml").write_text(CONFIG)
    (tmp_path / "indexes").mkdir()
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "other.aclj").write_text('net,example)/ - {"access": "allow"}\n')
    return tmp_path


def test_add_import_and_remove_write_the_first_file_sorted(tmp_path: Path) -> None:
    work = _work(tmp_path)
    (work / "excludes.txt").write_text("http://a.example/\nhttp://b.example/x\n\n")
    for args in (
        ["add", "web", "http://example.com/", "allow"],
        ["add", "web", "http://example.com/private", "exclude", "-u", "staff", "--by", "ana"],
        ["add", "web", "com,example)/one", "block", "-e", "--message", "Withdrawn"],
        ["importtxt", "web", "excludes.txt", "exclude"],
    ):
        done = gateway(["acl", *args], work)
        assert done.returncode == 0, (args, done.stderr)
    lines = (work / "acl" / "rules.aclj").read_text().splitlines()
    assert lines == sorted(lines, reverse=True)
    assert [line.split(" - ")[0] for line in lines] == [
        "example,b)/x",
        "example,a)/",
        "com,example)/private",
        "com,example)/one###",
        "com,example)/",
    ]
    assert '"modified_by": "ana"' in lines[2]
    assert '"message": "Withdrawn"' in lines[3]
    assert not list((work / "acl").glob(".*.tmp"))  # the temporary file was renamed
    assert len(read_rule_files([str(work / "acl"), str(work / "more")])) == 6

    missing = gateway(["acl", "remove", "web", "http://example.com/private"], work)
    assert missing.returncode == 1  # that rule is staff's: no rule for everyone
    removed = gateway(["acl", "remove", "web", "http://example.com/private", "-u", "staff"], work)
    assert removed.returncode == 0, removed.stderr
    assert "com,example)/private" not in (work / "acl" / "rules.aclj").read_text()

    listed = gateway(["acl", "list", "web"], work)
    assert listed.returncode == 0
    assert "net,example)/ - " in listed.stdout  # every file of the collection
    assert "com,example)/one### - " in listed.stdout


def test_match_prints_the_deciding_rule_and_the_access(tmp_path: Path) -> None:
    work = _work(tmp_path)
    gateway(["acl", "add", "web", "http://example.com/", "allow", "--by", "t"], work)
    gateway(["acl", "add", "web", "http://example.com/a", "exclude", "-u", "staff"], work)
    matched = gateway(["acl", "match", "web", "http://example.com/a/b"], work)
    assert matched.returncode == 0, matched.stderr
    assert "com,example)/ - " in matched.stdout
    assert "access: allow" in matched.stdout
    staff = gateway(["acl", "match", "web", "http://example.com/a/b", "-u", "staff"], work)
    assert "access: exclude" in staff.stdout
    default = gateway(["acl", "match", "web", "http://example.org/", "--at", "2014"], work)
    assert "<No Match, Using Default Rule> (default_access: block)" in default.stdout
    assert "access: block (capture time 20141231235959" in default.stdout


def test_bad_input_is_refused_with_exit_2(tmp_path: Path) -> None:
    work = _work(tmp_path)
    (work / "acl").mkdir()
    (work / "acl" / "rules.aclj").write_text('com, - {"access": "maybe"}\n')
    broken = gateway(["acl", "add", "web", "http://example.com/", "allow"], work)
    assert broken.returncode == 2
    assert "rules.aclj line 1: access 'maybe'" in broken.stderr
    unknown = gateway(["acl", "list", "nope"], work)
    assert unknown.returncode == 2
    assert "no collection 'nope'" in unknown.stderr
    bad_at = gateway(["acl", "match", "web", "http://example.com/", "--at", "yesterday"], work)
    assert bad_at.returncode == 2
