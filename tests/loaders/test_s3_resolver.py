"""The S3 resolver's settings and failures (its loads are in the contract suite,
``warc-s3``): shorthand forms, config errors with their YAML path, and a storage
that cannot be read reported as a load error, never a traceback."""

from __future__ import annotations

import pytest

from gateway.cdx.cdxj import CdxRecord
from gateway.clients import SharedClients
from gateway.config import parse_config
from gateway.errors import ConfigError, LoadError, UnsafeFilename
from gateway.loaders.resolvers import (
    RESOLVER_TYPES,
    S3_SHORTHAND_PREFIXES,
    resolver_config_from_shorthand,
)
from gateway.loaders.s3_resolver import S3Resolver, S3ResolverConfig
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig
from tests.conftest import free_port
from tests.loaders.conftest import make_finder
from tests.storage.seaweedfs import SeaweedFS

CAPTURE = CdxRecord.parse(
    'com,example)/ 20140127171200 {"url": "http://example.com", "mime": "text/html",'
    ' "status": "200", "digest": "B2LTWWPUOYAH7UIPQ7ZUPQ4VMBSVC36A", "length": "1046",'
    ' "offset": "334", "filename": "example.warc.gz"}'
)


def test_shorthands() -> None:
    assert RESOLVER_TYPES["s3"] is S3Resolver
    # resolver_kind_for_shorthand knows them without importing the S3 storage.
    assert S3Resolver.shorthand_prefixes == S3_SHORTHAND_PREFIXES
    aws = resolver_config_from_shorthand("s3://warcs/gateway")
    assert aws == S3ResolverConfig(bucket="warcs", prefix="gateway/")
    local = resolver_config_from_shorthand("s3+http://127.0.0.1:8333/warcs/a/b/")
    assert local == S3ResolverConfig(
        bucket="warcs", prefix="a/b/", endpoint="http://127.0.0.1:8333"
    )
    with pytest.raises(ValueError, match="names no bucket"):
        S3ResolverConfig.from_shorthand("s3:///x/")
    with pytest.raises(ValueError, match="expected s3://BUCKET/PREFIX/"):
        S3ResolverConfig.from_shorthand("s3+ftp://host/warcs/")


@pytest.mark.parametrize(
    ("resource", "path", "problem"),
    [
        ("s3://Warcs/x/", "collections.c.resource", "is not a bucket name"),
        ("{type: s3, bucket: Warcs}", "collections.c.resource.bucket", "is not a bucket name"),
        (
            "{type: s3, bucket: warcs, prefix: a}",
            "collections.c.resource.prefix",
            "expected empty or segments ending with '/'",
        ),
        (
            "{type: s3, bucket: warcs, aws_secret_access_key: x}",
            "collections.c.resource.aws_secret_access_key",
            "unknown key",
        ),
    ],
)
def test_config_errors_name_the_yaml_path(resource: str, path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(f"collections:\n  c:\n    index: /tmp\n    resource: {resource}\n")
    assert caught.value.path == path
    assert problem in caught.value.problem


async def _load(loader: WarcLoader) -> None:
    from gateway.loaders.base import LoadContext

    context = LoadContext(request_url=CAPTURE.url, find_original=make_finder([]))
    loaded = await loader.load(CAPTURE.copy(), context)
    await loaded.aclose()


async def test_failures_are_load_errors(
    clients: SharedClients, s3_env: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = f"s3+http://127.0.0.1:{free_port()}/warcs/x/"
    loader = WarcLoader(WarcLoaderConfig.from_shorthand(down), clients=clients)
    with pytest.raises(LoadError, match="Could not connect to the endpoint"):
        await _load(loader)
    no_bucket = f"s3+{s3_env.endpoint}/no-such-bucket/x/"
    loader = WarcLoader(WarcLoaderConfig.from_shorthand(no_bucket), clients=clients)
    with pytest.raises(LoadError, match="no bucket 'no-such-bucket'"):
        await _load(loader)
    with pytest.raises(UnsafeFilename):
        await S3Resolver(S3ResolverConfig(bucket="warcs"), clients=clients).locate("../x.warc")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    other = f"s3+{s3_env.endpoint}/elsewhere/x/"
    loader = WarcLoader(WarcLoaderConfig.from_shorthand(other), clients=clients)
    with pytest.raises(LoadError, match="no S3 credentials in the environment"):
        await _load(loader)
