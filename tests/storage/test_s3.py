"""What only an S3 storage can get wrong: credentials, buckets, endpoints."""

from __future__ import annotations

import pytest

from gateway.storage.errors import StorageRefused, StorageUnavailable
from gateway.storage.s3 import S3Storage
from gateway.storage.s3_config import S3StorageConfig
from tests.conftest import free_port
from tests.storage.seaweedfs import SeaweedFS


def _config(endpoint: str, bucket: str) -> S3StorageConfig:
    return S3StorageConfig(bucket=bucket, endpoint=endpoint, connect_timeout_s=2.0)


async def test_no_credentials_in_the_environment(
    s3_env: SeaweedFS, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(StorageRefused, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        await S3Storage.open("s3", _config(s3_env.endpoint, s3_bucket))


async def test_wrong_secret(
    s3_env: SeaweedFS, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(StorageRefused, match="HTTP 403"):
        await S3Storage.open("s3", _config(s3_env.endpoint, s3_bucket))


async def test_missing_bucket(s3_env: SeaweedFS) -> None:
    with pytest.raises(StorageRefused, match=r"no bucket 'no-such-bucket'.*create it first"):
        await S3Storage.open("s3", _config(s3_env.endpoint, "no-such-bucket"))


async def test_nothing_listening(s3_env: SeaweedFS) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(StorageUnavailable, match="open bucket") as caught:
        await S3Storage.open("s3", _config(endpoint, "warcs"))
    assert caught.value.retryable


async def test_describe_names_bucket_prefix_and_endpoint(s3_env: SeaweedFS, s3_bucket: str) -> None:
    config = S3StorageConfig(bucket=s3_bucket, endpoint=s3_env.endpoint, prefix="gw/")
    storage = await S3Storage.open("s3", config)
    try:
        assert storage.describe() == (
            f"S3 bucket {s3_bucket!r}, prefix 'gw/' at {s3_env.endpoint} (us-east-1)"
        )
    finally:
        await storage.close()
