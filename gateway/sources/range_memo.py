"""RangeMemo: what lookups of one index source found, by version of a file.

Used by the local index sources (:func:`gateway.sources.cdxj_scan.scan_file`
for CDXJ files and directories, :mod:`gateway.sources.zipnum` for local
ZipNum clusters); the records are kept as :meth:`CdxRecord.snapshot` images.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from gateway.cdx.cdxj import CdxRecord

__all__ = ["RANGE_MEMO_RECORDS", "RANGE_RECORDS", "Image", "RangeMemo"]

#: Records a remembered range may hold (a longer answer is read again each time).
RANGE_RECORDS: Final = 64
#: Records (an empty range counts one) a :class:`RangeMemo` holds by default.
RANGE_MEMO_RECORDS: Final = 4096

#: What :meth:`CdxRecord.snapshot` gives.
Image = tuple[str, str, str] | CdxRecord


class RangeMemo:
    """What lookups of one source found, by version of a file and range.

    ``(identity, key, end) -> (images, versions)``: the images
    (:meth:`CdxRecord.snapshot`) of the records of ``[key, end)`` in the file
    version ``identity`` (device, inode, mtime, size, as :class:`Handle`
    has it), and the versions of other files they were read from (a ZipNum
    cluster's location file and shards; nothing for a plain file). Only
    answers of at most :data:`RANGE_RECORDS` records are kept, and at most
    ``max_records`` records in all (an empty answer counts one; the first
    remembered goes first). A version of a file does not change (a changed
    file has another identity), so a remembered answer is the answer:
    replay asks for the same URLs again and again (a TimeGate, then the
    memento, then each embed), and a repeated one-URL lookup then costs a
    dict lookup and a record instead of a search, a read and a parse
    (bench/README.md, run H).
    """

    __slots__ = ("_answers", "held", "hits", "max_records", "misses")

    def __init__(self, max_records: int = RANGE_MEMO_RECORDS) -> None:
        self.max_records = max_records
        self.held = 0
        #: Lookups answered from the memo, and those read (``/metrics``), counted
        #: by the source that uses it.
        self.hits = 0
        self.misses = 0
        self._answers: OrderedDict[
            tuple[object, bytes, bytes], tuple[tuple[Image, ...], tuple[object, ...]]
        ] = OrderedDict()

    def get(
        self, identity: object, key: bytes, end: bytes
    ) -> tuple[tuple[Image, ...], tuple[object, ...]] | None:
        """The remembered answer and versions, or None."""
        return self._answers.get((identity, key, end))

    def remember(
        self,
        identity: object,
        key: bytes,
        end: bytes,
        images: Sequence[Image],
        versions: tuple[object, ...] = (),
    ) -> None:
        """Keep the answer to ``[key, end)`` of version ``identity`` (class docstring),
        in place of one kept before (whose other versions were not current)."""
        answers = self._answers
        entry = (identity, key, end)
        if len(images) > RANGE_RECORDS:
            return
        replaced = answers.pop(entry, None)
        if replaced is not None:
            self.held -= len(replaced[0]) + 1
        answers[entry] = (tuple(images), versions)
        self.held += len(images) + 1
        while self.held > self.max_records:
            _, (dropped, _) = answers.popitem(last=False)
            self.held -= len(dropped) + 1
