"""``store.storages``, ``store.retention`` and ``store.publish`` in collections.yaml:
parsed into typed settings, every mistake a ConfigError naming its YAML path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import parse_config
from gateway.errors import ConfigError
from gateway.storage.local import LocalStorageConfig
from gateway.storage.s3_config import S3StorageConfig
from gateway.storage.settings import RetentionPolicy, SettingError
from gateway.store.settings import StoreSettings

ISSUE_EXAMPLE = """
store:
  root: ./archive/store
  storages:
    backup: {type: local, path: /mnt/backup/warcs}
    s3: {type: s3, endpoint: "http://127.0.0.1:8333", bucket: warcs, prefix: "gateway/",
         region: us-east-1}
  retention:
    copies: 2
    archival_max_age_s: 3600
    batch_size: 100
    parallel_copies: 4
"""


def test_the_issue_example_parses() -> None:
    store = parse_config(ISSUE_EXAMPLE).store
    assert list(store.storages) == ["backup", "s3"]
    backup, s3 = store.storages["backup"], store.storages["s3"]
    assert backup.type == "local"
    assert backup.config == LocalStorageConfig(path="/mnt/backup/warcs")
    assert backup.path == "store.storages.backup"
    assert s3.type == "s3"
    assert s3.config == S3StorageConfig(
        bucket="warcs", endpoint="http://127.0.0.1:8333", prefix="gateway/", region="us-east-1"
    )
    assert store.retention == RetentionPolicy(
        copies=2, archival_max_age_s=3600.0, batch_size=100, parallel_copies=4
    )
    assert store.root == os.path.abspath("./archive/store")  # resolved at load (gateway.paths)


def test_defaults_mean_no_replication() -> None:
    store = parse_config("store: {root: ./a}").store
    assert dict(store.storages) == {}
    assert store.retention.copies == 1
    assert parse_config("").store.retention == RetentionPolicy()


@pytest.mark.parametrize(
    ("store_yaml", "path", "message"),
    [
        ("{storages: {s3: {type: s3, bucket: Warcs}}}", "store.storages.s3.bucket", "bucket name"),
        ("{storages: {s3: {type: s3}}}", "store.storages.s3.bucket", "missing required key"),
        (
            "{storages: {s3: {type: s3, bucket: warcs, endpoint: 'ftp://x'}}}",
            "store.storages.s3.endpoint",
            "http(s)://host",
        ),
        (
            "{storages: {s3: {type: s3, bucket: warcs, prefix: gateway}}}",
            "store.storages.s3.prefix",
            "ending with '/'",
        ),
        (
            "{storages: {s3: {type: s3, bucket: warcs, part_size_bytes: 1024}}}",
            "store.storages.s3.part_size_bytes",
            "5 MiB",
        ),
        (
            "{storages: {s3: {type: s3, bucket: warcs, aws_secret_access_key: x}}}",
            "store.storages.s3.aws_secret_access_key",
            "credentials never go in the config",
        ),
        ("{storages: {s3: {type: s3, bucket: warcs, bukket: x}}}", "store.storages.s3.bukket", ""),
        ("{storages: {b: {type: nfs, path: x}}}", "store.storages.b.type", "local, s3"),
        ("{storages: {b: {path: x}}}", "store.storages.b.type", "unknown storage type None"),
        ("{storages: {b: {type: local}}}", "store.storages.b.path", "missing required key"),
        ("{storages: {b: {type: local, path: ''}}}", "store.storages.b.path", "empty"),
        ("{storages: {primary: {type: local, path: x}}}", "store.storages.primary", "primary"),
        ("{storages: {b: x}}", "store.storages.b", "expected a storage mapping"),
        ("{storages: [x]}", "store.storages", "expected a mapping of storage names"),
        ("{retention: {copies: 2}}", "store.retention.copies", "only the primary"),
        (
            "{storages: {b: {type: local, path: x}}, retention: {copies: 3}}",
            "store.retention.copies",
            "only 2 places (the primary and b)",
        ),
        ("{retention: {copies: 0}}", "store.retention.copies", "1 or more"),
        ("{retention: {batch_size: 0}}", "store.retention.batch_size", "1 or more"),
        ("{retention: {parallel_copies: -1}}", "store.retention.parallel_copies", "1 or more"),
        ("{retention: {archival_max_age_s: 0}}", "store.retention.archival_max_age_s", "positive"),
        ("{retention: {copies: two}}", "store.retention.copies", "expected an integer"),
        ("{retention: {copy: 2}}", "store.retention.copy", "unknown key"),
    ],
)
def test_mistakes_name_their_yaml_path(store_yaml: str, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"store: {store_yaml}")
    assert caught.value.path == path
    assert message in caught.value.problem


def test_store_settings_refuse_a_policy_they_cannot_hold() -> None:
    with pytest.raises(SettingError, match="copies"):
        StoreSettings(retention=RetentionPolicy(copies=2))


def test_check_config_lists_the_storages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "collections.yaml"
    config.write_text(ISSUE_EXAMPLE + "collections: {stored: $store}\n", "utf-8")
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "store storages (retention: 2 copies, the primary included)" in out
    assert "  backup: local directory /mnt/backup/warcs" in out
    assert "  s3: S3 bucket 'warcs', prefix 'gateway/' at http://127.0.0.1:8333 (us-east-1)" in out
    config.write_text(
        ISSUE_EXAMPLE + "  publish: {redis: 'redis://127.0.0.1:6379/0/a:cdxj'}\n"
        "collections: {stored: $store}\n",
        "utf-8",
    )
    assert main(["check-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "store publish: safe files' captures to redis 127.0.0.1:6379/0/a:cdxj, " in out


def test_publish_settings() -> None:
    store = parse_config(
        ISSUE_EXAMPLE + "  publish: {redis: 'redis://:pw@127.0.0.1:6379/0/a:cdxj'}"
    ).store
    assert store.publish is not None
    assert store.publish.storage == "s3"  # the only s3 storage
    assert (store.publish.server_url, store.publish.key) == (
        "redis://:pw@127.0.0.1:6379/0",
        "a:cdxj",
    )
    assert store.publish.target == ":***@127.0.0.1:6379/0/a:cdxj"


@pytest.mark.parametrize(
    ("publish", "path", "message"),
    [
        ("{redis: 'redis://127.0.0.1:6379/0'}", "store.publish.redis", "no sorted-set key"),
        ("{redis: 'redis://h/0/k', storage: nope}", "store.publish.storage", "not one of"),
        ("{redis: 'redis://h/0/k', stor: s3}", "store.publish.stor", "unknown key"),
        ("{}", "store.publish.redis", "missing required key"),
    ],
)
def test_publish_mistakes_name_their_yaml_path(publish: str, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(ISSUE_EXAMPLE + f"  publish: {publish}")
    assert caught.value.path == path
    assert message in caught.value.problem


def test_publish_needs_a_storage_to_read_from() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("store: {publish: {redis: 'redis://h/0/k'}}")
    assert caught.value.path == "store.publish.storage"
    assert "0 s3 storages are configured" in caught.value.problem
