"""Resolvers (gateway.loaders.resolvers): shorthands, prefixes, path indexes, safety."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.cdx.cdxj import CdxRecord
from gateway.clients import SharedClients
from gateway.errors import ArchiveFileNotFound, UnsafeFilename
from gateway.loaders.base import FindOriginal
from gateway.loaders.resolvers import (
    RESOLVER_TYPES,
    PathIndexResolver,
    PathIndexResolverConfig,
    PrefixResolver,
    PrefixResolverConfig,
    Resolver,
    build_resolver,
    check_filename,
    resolver_config_from_shorthand,
    resolver_kind_for_shorthand,
)
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig
from tests.loaders.conftest import capture, load_all


def test_kind_detection(tmp_path: Path) -> None:
    index = tmp_path / "paths.txt"
    index.write_text("a.warc.gz\t/data/a.warc.gz\n")
    assert resolver_kind_for_shorthand("warc-index+file:///x/paths.txt") == "path_index"
    assert resolver_kind_for_shorthand("warc-prefix+/data/") == "prefix"
    assert resolver_kind_for_shorthand("http://host/warcs/") == "prefix"
    assert resolver_kind_for_shorthand("https://host/warcs/") == "prefix"
    assert resolver_kind_for_shorthand(f"file://{index}") == "prefix"
    assert resolver_kind_for_shorthand(str(index)) == "path_index"
    assert resolver_kind_for_shorthand(str(tmp_path)) == "prefix"
    assert resolver_kind_for_shorthand(str(tmp_path / "not-yet")) == "prefix"
    assert {"prefix", "path_index"} <= set(RESOLVER_TYPES)
    for name, factory in RESOLVER_TYPES.items():
        assert factory.shorthand_prefixes, name


@pytest.mark.parametrize(
    ("text", "prefix"),
    [
        ("/data/warcs", "/data/warcs/"),
        ("/data/warcs/", "/data/warcs/"),
        ("file:///data/my%20warcs", "/data/my warcs/"),
        ("file://localhost/data/warcs/", "/data/warcs/"),
        ("warc-prefix+/data/warcs", "/data/warcs/"),
        ("warc-prefix+file:///data/warcs/", "/data/warcs/"),
        ("http://host/warcs/", "http://host/warcs/"),
        ("warc-prefix+https://host/get?file=", "https://host/get?file="),
    ],
)
def test_prefix_shorthands(text: str, prefix: str) -> None:
    config = PrefixResolverConfig.from_shorthand(text)
    assert config.prefix == prefix
    assert resolver_config_from_shorthand(text) == config


def test_relative_prefix_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert PrefixResolverConfig.from_shorthand("warcs").prefix == f"{tmp_path}/warcs/"


@pytest.mark.parametrize(
    "text",
    ["", "warc-prefix+", "http://", "s3://bucket/warcs/", "file:relative", "file://host/x/"],
)
def test_bad_prefix_shorthands(text: str) -> None:
    with pytest.raises(ValueError, match="expected"):
        PrefixResolverConfig.from_shorthand(text)


def test_prefix_config_normalizes_and_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert PrefixResolverConfig(prefix="/data/warcs").prefix == "/data/warcs/"
    # A relative prefix follows the one rule of gateway.paths, in the mapping form too.
    monkeypatch.chdir(tmp_path)
    assert PrefixResolverConfig(prefix="relative/warcs").prefix == f"{tmp_path}/relative/warcs/"


def test_path_index_shorthands(tmp_path: Path) -> None:
    path = tmp_path / "paths.txt"
    for text in (f"warc-index+file://{path}", f"warc-index+{path}", str(path)):
        assert PathIndexResolverConfig.from_shorthand(text).path == str(path)
    for bad in ("warc-index+", "warc-index+http://host/paths.txt", "warc-index+redis://h/0"):
        with pytest.raises(ValueError, match="expected"):
            PathIndexResolverConfig.from_shorthand(bad)


@pytest.mark.parametrize(
    "name",
    [
        "a.warc.gz",
        "2014/01/a.warc.gz",
        "./a.warc.gz",
        "a..b.warc.gz",
        "..a.warc.gz",
        "crawl-2014-01-01T00:00:00.warc.gz",
    ],
)
def test_safe_filenames(name: str) -> None:
    check_filename(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "..",
        "../a.warc.gz",
        "a/../../b",
        "a/..",
        "/abs/a.warc.gz",
        "C:a.warc.gz",
        "file:a.warc.gz",
        "FILE:/etc/passwd",
        "x://a",
        "a/b://c",
        "a\\b",
        "a\x00b",
        "a\nb",
        "%2E%2E/a",
        "%2fetc/passwd",
    ],
)
def test_unsafe_filenames(name: str) -> None:
    with pytest.raises(UnsafeFilename, match="expected a path relative to the archive prefix"):
        check_filename(name)


async def test_prefix_resolver_locations(tmp_path: Path) -> None:
    local = PrefixResolver(PrefixResolverConfig(prefix=str(tmp_path)))
    assert await local.locate("a.warc.gz") == [f"{tmp_path}/a.warc.gz"]
    assert await local.locate("sub//./a.warc.gz") == [f"{tmp_path}/sub/a.warc.gz"]
    remote = PrefixResolver(PrefixResolverConfig(prefix="http://h/w/"))
    assert await remote.locate("a b#c?.warc.gz") == ["http://h/w/a%20b%23c%3F.warc.gz"]
    assert await remote.locate("2014/a.warc.gz") == ["http://h/w/2014/a.warc.gz"]
    assert "HTTP range" in remote.describe()
    # A missing local directory prefix is created (fresh default config).
    PrefixResolver(PrefixResolverConfig(prefix=str(tmp_path / "new")))
    assert (tmp_path / "new").is_dir()
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(ValueError, match="cannot be created"):
        PrefixResolver(PrefixResolverConfig(prefix=str(blocked / "sub")))
    assert isinstance(local, Resolver)


async def test_path_index_resolver(tmp_path: Path) -> None:
    index = tmp_path / "paths.txt"
    index.write_text(
        "# comment\n"
        "\n"
        "a.warc.gz\t/data/a.warc.gz\thttp://mirror/a.warc.gz\n"
        "b.warc.gz\tsub/b.warc.gz\n"
        "a.warc.gz\tfile:///other/a.warc.gz\n"
    )
    config = PathIndexResolverConfig(path=str(index), check_interval_s=0)
    resolver = build_resolver(config, clients=SharedClients())
    assert isinstance(resolver, PathIndexResolver)
    assert await resolver.locate("a.warc.gz") == [
        "/data/a.warc.gz",
        "http://mirror/a.warc.gz",
        "/other/a.warc.gz",
    ]
    assert await resolver.locate("b.warc.gz") == [f"{tmp_path}/sub/b.warc.gz"]
    assert await resolver.locate("c.warc.gz") == []
    assert await resolver.locate("../a.warc.gz") == []  # only a key: nothing to escape
    # Changed on disk: read again (mtime, size or inode differ).
    index.write_text("c.warc.gz\t/data/c.warc.gz\n")
    os.utime(index, ns=(1, 1))
    assert await resolver.locate("c.warc.gz") == ["/data/c.warc.gz"]
    assert await resolver.locate("a.warc.gz") == []
    index.unlink()
    with pytest.raises(ArchiveFileNotFound, match="path index"):
        await resolver.locate("c.warc.gz")


async def test_path_index_is_not_reread_within_its_interval(tmp_path: Path) -> None:
    index = tmp_path / "paths.txt"
    index.write_text("a.warc.gz\t/data/a.warc.gz\n")
    resolver = PathIndexResolver(PathIndexResolverConfig(path=str(index), check_interval_s=3600))
    assert await resolver.locate("a.warc.gz") == ["/data/a.warc.gz"]
    index.write_text("a.warc.gz\t/data/moved.warc.gz\n")
    assert await resolver.locate("a.warc.gz") == ["/data/a.warc.gz"]


async def test_loader_with_path_index_then_prefix(
    clients: SharedClients,
    warcs_dir: Path,
    tmp_path: Path,
    sample_index: list[CdxRecord],
    finder: FindOriginal,
) -> None:
    index = tmp_path / "paths.txt"
    index.write_text(
        f"renamed.warc.gz\t{tmp_path}/missing.warc.gz\t{warcs_dir}/iana.warc.gz\n"
        f"../iana.warc.gz\t{warcs_dir}/iana.warc.gz\n"
    )
    config = WarcLoaderConfig.from_shorthands([f"warc-index+{index}", str(warcs_dir)])
    loader = WarcLoader(config, clients=clients)
    assert "path index" in loader.describe()
    assert "prefix" in loader.describe()
    record = capture(sample_index, "iana.warc.gz", 334)
    loaded, _ = await load_all(loader, record, finder)  # through the prefix
    assert loaded.target_uri == "http://www.iana.org/"
    record.fields["filename"] = "renamed.warc.gz"  # second location of the path index
    loaded, _ = await load_all(loader, record, finder)
    assert loaded.target_uri == "http://www.iana.org/"
    # The administrator may map any name; the prefix would refuse this one.
    record.fields["filename"] = "../iana.warc.gz"
    loaded, _ = await load_all(loader, record, finder)
    assert loaded.target_uri == "http://www.iana.org/"
    record.fields["filename"] = "../other.warc.gz"
    with pytest.raises(UnsafeFilename):
        await load_all(loader, record, finder)


def test_loader_config() -> None:
    config = WarcLoaderConfig.from_shorthand("https://h/warcs/")
    assert config.resolvers == (PrefixResolverConfig(prefix="https://h/warcs/"),)
    with pytest.raises(ValueError, match="at least one"):
        WarcLoaderConfig(resolvers=())
    with pytest.raises(ValueError, match="chunk_bytes"):
        WarcLoaderConfig(resolvers=config.resolvers, chunk_bytes=10)
    loader = WarcLoader.from_config(config, clients=SharedClients())
    assert loader.describe() == "WARC records from prefix https://h/warcs/ (HTTP range requests)"
