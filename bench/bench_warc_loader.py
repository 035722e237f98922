"""Benchmark: WarcLoader cost per record, in process (no HTTP server, no index).

    PYTHONPATH=. python bench/bench_warc_loader.py [--loads 2000] [--inline-max 1048576]

Loads sample captures again and again through :class:`WarcLoader` (open,
parse both header blocks, drain the body, close) and prints microseconds per
load and the inflater in use (ISA-L when ``isal`` is installed, else zlib):

- ``6KB``: ``http://www.iana.org/`` (2.3 KB gzip member, 6.4 KB served),
- ``225KB``: ``OpenSans-Bold.ttf`` (117 KB member, 225 KB served),
- ``656KB``: ``/protocols`` (64 KB member, 656 KB served),
- ``revisit``: a same-URL revisit of ``dupes.warc.gz`` (two records opened).

The loader's own overhead is the 6 KB figure minus the inflation of 2.3 KB
(~20 us); for the larger records inflation dominates. Speed is measured here,
never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

from gateway.cdx.cdxj import CdxRecord
from gateway.clients import SharedClients
from gateway.loaders import warc_inflate
from gateway.loaders.base import LoadContext
from gateway.loaders.warc import WarcLoader, WarcLoaderConfig

SAMPLE = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "pywb-sample"


def first_line(path: Path, urlkey: str, nth: int = 0) -> CdxRecord:
    found = [line for line in path.read_text("utf-8").splitlines() if line.startswith(urlkey + " ")]
    return CdxRecord.parse(found[nth])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=2000)
    parser.add_argument("--inline-max", type=int, default=1024 * 1024)
    args = parser.parse_args()

    iana = SAMPLE / "cdxj" / "iana.cdxj"
    dupes = SAMPLE / "cdxj" / "dupes.cdxj"
    captures = {
        "6KB": first_line(iana, "org,iana)/"),
        "225KB": first_line(iana, "org,iana)/_css/2013.1/fonts/opensans-bold.ttf"),
        "656KB": first_line(iana, "org,iana)/protocols"),
        "revisit": first_line(dupes, "com,example)/", 1),
    }
    original = first_line(dupes, "com,example)/", 0)

    async def find_original(url: str, timestamp: str, digest: str) -> AsyncIterator[CdxRecord]:
        yield original

    base = WarcLoaderConfig.from_shorthand(str(SAMPLE / "warcs"))
    config = WarcLoaderConfig(resolvers=base.resolvers, inline_read_max_bytes=args.inline_max)
    clients = SharedClients()
    loader = WarcLoader(config, clients=clients)
    print(f"inflater: {warc_inflate._ZLIB.__name__}, inline_read_max_bytes={args.inline_max}")
    for name, capture in captures.items():
        ctx = LoadContext(request_url=capture.url, find_original=find_original)
        loads = args.loads if name in ("6KB", "revisit") else max(1, args.loads // 4)
        best = float("inf")
        for _round in range(3):
            start = time.perf_counter()
            size = 0
            for _ in range(loads):
                loaded = await loader.load(capture, ctx)
                size = len(loaded.warc_headers) + len(loaded.http_headers)
                async for chunk in loaded.body:
                    size += len(chunk)
                await loaded.aclose()
            best = min(best, (time.perf_counter() - start) / loads)
        print(f"{name:8} {size:8d} bytes  {best * 1e6:8.1f} us/load")


if __name__ == "__main__":
    asyncio.run(main())
