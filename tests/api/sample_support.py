"""The sample archive's CDXJ indexes with post-test.cdxj sorted, for API tests.

``cdxj/post-test.cdxj`` in the sample is not sorted (FIELD-NOTES), so binary
search and (urlkey, timestamp) resume keys over it miss captures; the sorted
folder replaces it with an index of ``warcs/post-test.warc.gz`` written by the
gateway's own indexer (cdxj-indexer), and links every other ``*.cdxj`` as is.
"""

from __future__ import annotations

from pathlib import Path

from gateway.index.indexer import write_cdxj_index

__all__ = ["sorted_sample_indexes"]


def sorted_sample_indexes(sample_dir: Path, folder: Path) -> Path:
    """Fill ``folder`` (made if missing) with the sample's ``*.cdxj`` indexes,
    post-test.cdxj sorted; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for index in sorted((sample_dir / "cdxj").glob("*.cdxj")):
        if index.name != "post-test.cdxj":
            (folder / index.name).symlink_to(index)
    with (folder / "post-test.cdxj").open("w") as out:
        write_cdxj_index([sample_dir / "warcs" / "post-test.warc.gz"], out)
    return folder
