"""Inflating a record's gzip member, a bounded piece at a time.

A ``.warc.gz`` holds one gzip member per record (WARC 1.1 Annex D), so a
record's bytes start with the gzip magic (RFC 1952 section 2.3.1) when it is
compressed. :class:`Decoder` gunzips that one member, or passes plain bytes
through, at most 256 KiB out per call (a decompression bomb never takes more
memory than that); compressed input it has not yet inflated waits in its
``tail``, and anything after the member's end belongs to the next record and
is dropped. ISA-L's inflate (PyPI ``isal``, identical output, 2-3x faster)
is used when it is installed (:mod:`gateway.storage.integrity`).
"""

from __future__ import annotations

import zlib
from typing import Any, Final

from gateway.errors import RecordFormatError
from gateway.storage.integrity import INFLATE_ERRORS, ZLIB

__all__ = ["GZIP_MAGIC", "INFLATE_OUT_BYTES", "Decoder"]

GZIP_MAGIC: Final = b"\x1f\x8b"
#: Largest piece inflated from compressed input at a time (decompression bombs).
INFLATE_OUT_BYTES: Final = 256 * 1024

# ISA-L's inflate when installed, else zlib (see the module docstring).
_ZLIB: Any = ZLIB
_INFLATE_ERRORS: Final = INFLATE_ERRORS


class Decoder:
    """Gunzips one member (or passes plain bytes), at most 256 KiB out per call."""

    __slots__ = ("done", "location", "tail", "zobj")

    def __init__(self, gzipped: bool, location: str, module: Any = None) -> None:
        module = _ZLIB if module is None else module
        self.zobj: Any = module.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
        self.tail = b""
        self.done = False
        self.location = location

    def decode(self, raw: bytes, max_out: int = INFLATE_OUT_BYTES) -> bytes:
        zobj = self.zobj
        if zobj is None:
            return raw
        tail = self.tail
        data = (tail + raw if raw else tail) if tail else raw
        try:
            out: bytes = zobj.decompress(data, max_out)
        except _INFLATE_ERRORS as exc:
            self.done = True
            self.tail = b""
            raise RecordFormatError(
                f"{self.location}: corrupt gzip data: {exc}; the file may be damaged "
                "(check it with 'warcio check')",
                {self.location: f"corrupt gzip data: {exc}"},
            ) from exc
        self.tail = zobj.unconsumed_tail
        if zobj.eof:
            # One member per record: anything after it belongs to the next record.
            self.done = True
            self.tail = b""
        return out
