"""``gateway --help`` and ``check-config`` import only what they need (no timing asserted).

Start-up time is mostly import time: these tests pin down which modules each
command leaves unimported, so a new import at the top of a module on their
path shows up here rather than as a slower command.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imported_after(argv: list[str], cwd: Path) -> set[str]:
    """The modules imported once ``gateway.cli.main(argv)`` has run (in a fresh interpreter)."""
    code = (
        "import json, sys\n"
        "from gateway.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    return set(json.loads(result.stderr.strip().splitlines()[-1]))


def test_help_imports_neither_aiohttp_nor_the_config_reader(tmp_path: Path) -> None:
    imported = _imported_after(["--help"], tmp_path)
    assert "argparse" in imported
    for heavy in ("aiohttp", "yaml", "gateway.config", "warcio", "tqdm", "asyncio"):
        assert heavy not in imported, heavy


def test_check_config_imports_no_handler_store_or_page_code(tmp_path: Path) -> None:
    config = tmp_path / "collections.yaml"
    config.write_text((ROOT / "collections.yaml").read_text())
    imported = _imported_after(["check-config", str(config)], tmp_path)
    assert "gateway.config" in imported
    for unneeded in (
        "gateway.api.index",
        "gateway.api.resource",
        "gateway.api.memento",
        "gateway.api.pages",
        "gateway.server.recording",
        "gateway.store.store",
        "cdxj_indexer",  # with pkg_resources and pyamf
        "surt",  # with tldextract and requests
        "jinja2",
        "prometheus_client",
        "tqdm",
        # The registries import only the types a config names (gateway.registry):
        # a config of local files needs no HTTP client, Redis or S3 library.
        "aiohttp",
        "yarl",
        "redis",
        "aiobotocore",
        "botocore",
        "gateway.server.app",
        "gateway.sources.memento_api",
        "gateway.loaders.live",
        "gateway.storage.s3",
    ):
        assert unneeded not in imported, unneeded
    assert "gateway.sources.cdxj_file" in imported  # the one source type it uses
