"""pywb warcserver's collection routes: the mode listing and ``list_sources``.

``GET /{coll}`` and ``POST /{coll}/postreq`` answer the modes a collection
route takes, ``{"modes": ["list_sources", "index", "resource"]}``, as pywb's
``BaseWarcServer`` does for a route without a mode. ``GET
/{coll}/list_sources`` answers ``{"sources": {member: kind}}``: every index
member of every step, in config order, named as the index API's ``source``
field names it, with pywb's names for their kinds (``file``, ``file_dir``
for a directory, ``zipnum``, ``redis``, ``redis-multikey`` for a key
template, ``cdx``, ``memento``, ``live``; ``store`` for the snapshot store,
``wacz`` for WACZ files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from aiohttp import web

from gateway.api.common import collection_for
from gateway.api.keys import CONFIG
from gateway.config import SourceSpec

__all__ = ["MODES", "list_sources_handler", "modes_handler"]

#: The modes of a collection route, in pywb's order (``ResourceHandler.get_supported_modes``).
MODES: Final = ("list_sources", "index", "resource")


async def modes_handler(request: web.Request) -> web.Response:
    """``GET /{coll}``, ``POST /{coll}/postreq``: ``{"modes": [...]}`` (404 for an unknown coll)."""
    collection_for(request)
    return web.json_response({"modes": list(MODES)})


async def list_sources_handler(request: web.Request) -> web.Response:
    """``GET /{coll}/list_sources``: ``{"sources": {member: kind}}`` (module docstring)."""
    collection = collection_for(request)
    config = request.app[CONFIG].collections[collection.name]
    sources = {name: source_kind(spec) for step in config.steps for name, spec in step.members}
    return web.json_response({"sources": sources})


def source_kind(spec: SourceSpec) -> str:
    """pywb's name for the kind of index source ``spec`` configures (its ``__str__``)."""
    if spec.type == "file" and Path(spec.config.path).is_dir():
        return "file_dir"
    if spec.type == "redis" and "*" in spec.config.key:
        return "redis-multikey"
    return spec.type
