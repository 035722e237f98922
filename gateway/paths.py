"""Paths in the config: the one rule by which a relative path becomes absolute.

A relative path in ``collections.yaml`` is relative to the working directory
of the command that loads the config (pywb's rule: its paths are relative to
the directory it runs in). Every path-valued key follows it, resolved once
when its config object is made, which is when the config is loaded: index
paths (``file``, ZipNum summaries and ``.loc`` files), ``resource:`` prefixes
and path indexes, ``store.root``, the ``path`` of local storages, ``replay.wabac_dir``. From then
on no code looks at the working directory again, so a store, an index or a
WARC prefix means the same files to every command and to a server whose
working directory changes.
"""

from __future__ import annotations

import os

__all__ = ["absolute_path"]


def absolute_path(path: str) -> str:
    """``path`` made absolute against the working directory and normalized.

    Symlinks are not resolved; a trailing ``/`` (a directory, for the index
    sources that create a missing one) is kept.

    >>> absolute_path("/srv/warcs/../indexes/")
    '/srv/indexes/'
    >>> absolute_path("archive/store") == os.path.join(os.getcwd(), "archive", "store")
    True
    """
    absolute = os.path.abspath(path)
    if path.endswith("/") and absolute != "/":
        absolute += "/"
    return absolute
