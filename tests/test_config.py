"""collections.yaml validation: every form parses, every error names its YAML path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.config import load_config, parse_config
from gateway.errors import ConfigError
from gateway.sources.cdxj_file import FileSourceConfig


def test_every_local_form_parses(sample_dir: Path, tmp_path: Path) -> None:
    pathindex = tmp_path / "pathindex.txt"
    pathindex.write_text(f"iana.warc.gz\t{sample_dir}/warcs/iana.warc.gz\n")
    config = parse_config(
        f"""
collections:
  short: {sample_dir}/cdxj/iana.cdxj
  dir:
    index: {sample_dir}/cdxj/
    resource: {sample_dir}/warcs/
  url: file://{sample_dir}/cdxj/iana.cdxj
  typed:
    index: {{type: file, path: {sample_dir}/cdx/iana.cdx, stat_interval_s: 0}}
    resource:
      - file://{sample_dir}/warcs/
      - warc-prefix+{sample_dir}/warcs/
      - warc-index+file://{pathindex}
      - http://127.0.0.1:1/warcs/
  group:
    index_group:
      a: {sample_dir}/cdxj/iana.cdxj
      b: {sample_dir}/cdxj/example.cdxj
    timeout: 0.25
  seq:
    sequence:
      - name: first
        index: {sample_dir}/cdxj/example.cdxj
      - index_group:
          c: {sample_dir}/cdxj/iana.cdxj
        resource: {sample_dir}/warcs/
"""
    )
    assert list(config.collections) == ["short", "dir", "url", "typed", "group", "seq"]
    group = config.collections["group"].steps[0]
    assert [name for name, _ in group.members] == ["a", "b"]
    assert group.timeout_s == 0.25
    seq = config.collections["seq"]
    assert seq.is_sequence
    assert [step.name for step in seq.steps] == ["first", "step2"]
    typed = config.collections["typed"].steps[0]
    assert typed.members[0][1].config == FileSourceConfig(
        path=f"{sample_dir}/cdx/iana.cdx", stat_interval_s=0.0
    )
    assert [r.type for r in typed.resolvers] == [
        "prefix",
        "prefix",
        "path_index",
        "prefix",
    ]


@pytest.mark.parametrize(
    ("text", "path", "needle"),
    [
        ("collections: [1]", "collections", "expected a mapping"),
        ("collections:\n  web: {idx: a.cdxj}", "collections.web.idx", "unknown key"),
        ("collections:\n  web: {}", "collections.web", "exactly one of 'index' or 'index_group'"),
        (
            "collections:\n  web: cdxx+http://example.com/cdx",
            "collections.web",
            "unknown source 'cdxx+http://example.com/cdx'",
        ),
        (
            "collections:\n  web:\n    index: {type: nope}",
            "collections.web.index.type",
            "unknown source type 'nope'",
        ),
        (
            "collections:\n  web:\n    index: {type: file}",
            "collections.web.index.path",
            "missing required key",
        ),
        (
            "collections:\n  web:\n    index: {type: file, path: 3}",
            "collections.web.index.path",
            "expected a string",
        ),
        (
            "collections:\n  web:\n    index: {type: file, path: a.cdxj, stat_interval_s: soon}",
            "collections.web.index.stat_interval_s",
            "expected a number",
        ),
        (
            "collections:\n  web:\n    index: {type: file, path: a.cdxj, stat_interval_s: -1}",
            "collections.web.index",
            "stat_interval_s -1.0: expected 0 to 3600 seconds",
        ),
        (
            "collections:\n  web:\n    sequence:\n      - index: a.cdxj\n      - idx: b",
            "collections.web.sequence[1].idx",
            "unknown key",
        ),
        (
            "collections:\n  web:\n    sequence:\n      - index: a.cdxj\n      - {}",
            "collections.web.sequence[1]",
            "exactly one of",
        ),
        (
            "collections:\n  web:\n    index_group: {a: a.cdxj}\n    timeout: fast",
            "collections.web.timeout",
            "positive number of seconds",
        ),
        ("collections:\n  web:\n    sequence: []", "collections.web.sequence", "non-empty list"),
        ("collections:\n  _status: a.cdxj", "collections._status", "invalid collection name"),
        (
            "collections:\n  web: {index: a.cdxj, resource: {type: ftp}}",
            "collections.web.resource.type",
            "unknown resource type",
        ),
        ("server: 1", "(top level).server", "unknown key"),
        ("collections: [", "<string>", "not valid YAML"),
    ],
)
def test_errors_name_the_yaml_path(text: str, path: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert info.value.path == path
    assert needle in info.value.problem


def test_missing_index_file_stops_start_up_with_status_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("collections:\n  web:\n    sequence:\n      - index: /nonexistent/x.cdxj\n")
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "collections.web.sequence[0].index" in result.stderr
    assert "does not exist" in result.stderr


def test_check_config_prints_the_tree(sample_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "ok.yaml"
    config.write_text(
        f"collections:\n  pywb:\n    index: {sample_dir}/cdxj/\n    resource: {sample_dir}/warcs/\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "pywb (collection)" in result.stdout
    assert (
        "  fuzzy matching: on: 0 site rule(s) with the generic rule, 6 normalization(s), "
        "at most 100 candidates per lookup\n"
    ) in result.stdout
    assert "index pywb:" in result.stdout
    assert "resource:" in result.stdout


def test_default_collections_yaml_is_valid() -> None:
    root = Path(__file__).resolve().parents[1]
    config = load_config(root / "collections.yaml")
    assert "web" in config.collections


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError) as info:
        load_config("/nonexistent/collections.yaml")
    assert "cannot read" in info.value.problem
