"""The settings of an ``s3`` storage: bucket, endpoint, key prefix, upload sizes.

``store.storages.<name>: {type: s3, endpoint: "http://127.0.0.1:8333", bucket:
warcs, prefix: "gateway/", region: us-east-1}``. An object ``name`` is the key
``prefix + name``. Sizes are in bytes, timeouts in seconds; the part-size
bounds are S3's (AWS S3 user guide, *Amazon S3 multipart upload limits*).
The settings never hold credentials (:mod:`gateway.storage.s3_client`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from gateway.storage.settings import SettingError

__all__ = ["MAX_PART_BYTES", "MIB", "MIN_PART_BYTES", "S3StorageConfig"]

MIB: Final = 1 << 20
#: S3's bounds on a part (every part but the last): 5 MiB to 5 GiB.
MIN_PART_BYTES: Final = 5 * MIB
MAX_PART_BYTES: Final = 5 * 1024 * MIB
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]")
_ENDPOINT = re.compile(r"https?://[^/?#\s]+/?")


@dataclass(frozen=True, slots=True, kw_only=True)
class S3StorageConfig:
    """``{type: s3, bucket, endpoint, prefix, region, ...}``.

    - ``bucket``: an existing bucket (3-63 lowercase letters, digits, '.', '-').
    - ``endpoint``: ``http(s)://host:port`` of an S3-compatible server
      (path-style requests); absent for AWS itself.
    - ``prefix``: prepended to every object name; empty or ending with '/'.
    - ``region``: the signing region (default ``us-east-1``).
    - ``single_put_max_bytes``: objects up to this size go up in one
      ``PutObject`` (default and most 5 GiB, S3's limit), held in memory up to
      ``part_size_bytes`` and in a temporary file (``$TMPDIR``) beyond;
      larger ones as multipart uploads.
    - ``part_size_bytes``: the parts of a multipart upload (5 MiB to 5 GiB;
      default 16 MiB). Memory per multipart put: about ``part_size_bytes *
      (parts_in_flight + 1)``.
    - ``parts_in_flight``: parts uploaded at once by one put (default 4).
    - ``connect_timeout_s``, ``read_timeout_s``: per request (10 and 60 s).
    """

    bucket: str
    endpoint: str | None = None
    prefix: str = ""
    region: str = "us-east-1"
    part_size_bytes: int = 16 * MIB
    single_put_max_bytes: int = MAX_PART_BYTES
    parts_in_flight: int = 4
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if not _BUCKET.fullmatch(self.bucket):
            raise SettingError(
                "bucket",
                f"{self.bucket!r} is not a bucket name; expected 3-63 lowercase letters, "
                "digits, '.' or '-', starting and ending with a letter or digit",
            )
        if self.endpoint is not None and not _ENDPOINT.fullmatch(self.endpoint):
            raise SettingError(
                "endpoint",
                f"{self.endpoint!r} is not an endpoint; expected http(s)://host[:port], "
                "such as http://127.0.0.1:8333 (or no endpoint, for AWS)",
            )
        if self.prefix and (
            not self.prefix.endswith("/")
            or any(not part or part.startswith(".") for part in self.prefix[:-1].split("/"))
        ):
            raise SettingError(
                "prefix",
                f"{self.prefix!r}: expected empty or segments ending with '/', none empty "
                "or starting with '.', such as 'gateway/'",
            )
        if not self.region:
            raise SettingError("region", "empty; expected a region such as us-east-1")
        if not MIN_PART_BYTES <= self.part_size_bytes <= MAX_PART_BYTES:
            raise SettingError(
                "part_size_bytes",
                f"{self.part_size_bytes}: expected {MIN_PART_BYTES} (5 MiB) to "
                f"{MAX_PART_BYTES} (5 GiB), S3's bounds on a part",
            )
        if not self.part_size_bytes <= self.single_put_max_bytes <= MAX_PART_BYTES:
            raise SettingError(
                "single_put_max_bytes",
                f"{self.single_put_max_bytes}: expected part_size_bytes "
                f"({self.part_size_bytes}) to {MAX_PART_BYTES} (5 GiB, S3's largest PutObject)",
            )
        if not 1 <= self.parts_in_flight <= 64:
            raise SettingError("parts_in_flight", f"{self.parts_in_flight}: expected 1 to 64")
        for field in ("connect_timeout_s", "read_timeout_s"):
            if not getattr(self, field) > 0:
                raise SettingError(field, f"{getattr(self, field)}: expected a positive duration")
