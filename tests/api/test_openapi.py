"""``/openapi.json``: a valid OpenAPI 3.1 document that describes exactly the app's routes."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from gateway.access.tokens import token_sha256
from gateway.api.openapi import openapi_document
from gateway.config import parse_config
from gateway.server.app import create_app

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[str], Awaitable[Client]]
#: Not an API route: the catch-all that answers 404, 405 and CORS preflights.
CATCH_ALL = "/{path}"


def registered_operations(app: web.Application) -> set[tuple[str, str]]:
    """``(method, path template)`` of every route, in OpenAPI's spelling (no regexes)."""
    found = set()
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if path == CATCH_ALL:
            continue
        found.add((route.method.lower(), path))
    return found


def described_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method, path)
        for path, operations in document["paths"].items()
        for method in operations
        if method in {"get", "head", "post", "put", "delete", "options", "patch"}
    }


async def test_the_document_is_valid_openapi_3_1(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    document = await resp.json()
    assert document["openapi"] == "3.1.0"
    validate(document)  # raises on any violation of the OpenAPI 3.1 schema


def test_every_registered_route_is_described_and_nothing_else(sample_yaml: str) -> None:
    app = create_app(parse_config(sample_yaml))
    registered = registered_operations(app)
    described = described_operations(openapi_document())
    assert registered - described == set(), "routes missing from the OpenAPI document"
    assert described - registered == set(), "the document describes routes that do not exist"
    assert ("post", "/{coll}/resource-post") in registered  # the spellings are all there


def test_path_parameters_are_declared() -> None:
    document = openapi_document()
    for path, operations in document["paths"].items():
        names = set(re.findall(r"\{(\w+)\}", path))
        for method, operation in operations.items():
            declared = set()
            for param in operation["parameters"]:
                if "$ref" in param:
                    param = document["components"]["parameters"][param["$ref"].split("/")[-1]]
                if param["in"] == "path":
                    declared.add(param["name"])
            assert declared == names, (method, path)


async def test_error_answers_match_the_error_schema(
    make_client: MakeClient, sample_yaml: str
) -> None:
    client = await make_client(sample_yaml)
    document = openapi_document()
    error = Draft202012Validator(document["components"]["schemas"]["Error"])
    requests = {
        ("get", "/{coll}/index"): ("/nowhere/index?url=iana.org", 404),
        ("get", "/{coll}/cdx"): ("/pywb/cdx?url=iana.org&limit=x", 400),
        ("get", "/{coll}/resource"): ("/pywb/resource?url=http://example.net/none", 404),
        ("get", "/{coll}/timegate/{url}"): ("/pywb/timegate/http://example.net/none", 404),
        ("get", "/{coll}/timemap/{format}/{url}"): ("/pywb/timemap/xml/http://iana.org/", 400),
        ("post", "/{coll}/resource/postreq"): ("/pywb/resource/postreq", 400),
    }
    for (method, path), (target, status) in requests.items():
        resp = await client.request(method.upper(), target, data=b"not a request")
        assert resp.status == status, target
        assert str(status) in document["paths"][path][method]["responses"], (path, status)
        error.validate(await resp.json())


async def test_token_refusals_are_described_where_a_token_can_be_required(
    make_client: MakeClient, sample_yaml: str
) -> None:
    document = openapi_document()
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    paths = document["paths"]
    assert paths["/{coll}/resource"]["post"]["security"] == [{}, {"bearer": ["record"]}]
    assert paths["/{coll}/{url}"]["head"]["security"] == [{}, {"bearer": ["record"]}]
    for path in ("/", "/_health", "/_ready", "/openapi.json", "/_wabac/{name}"):
        assert "security" not in paths[path]["get"], path  # always open
    record, admin = "record-token-0123456789", "admin-token-0123456789ab"
    auth = f"""
auth:
  tokens:
    - {{sha256: {token_sha256(record)}, scopes: [record]}}
    - {{sha256: {token_sha256(admin)}, scopes: [admin]}}
  require:
    admin: [/_jobs, /_status, /metrics]
"""
    client = await make_client(sample_yaml + auth)
    error = Draft202012Validator(document["components"]["schemas"]["Error"])
    refusals = [
        ("/_jobs", {}, 401),
        ("/_status", {"Authorization": "Bearer not-a-token-of-this-gateway"}, 401),
        ("/metrics", {"Authorization": f"Bearer {record}"}, 403),
        ("/_jobs", {"Authorization": "Bearer"}, 400),
    ]
    for path, headers, status in refusals:
        resp = await client.get(path, headers=headers)
        assert resp.status == status, path
        operation = paths[path]["get"]
        assert operation["security"] == [{}, {"bearer": ["admin"]}]
        assert "WWW-Authenticate" in operation["responses"][str(status)]["headers"]
        assert resp.headers["WWW-Authenticate"].startswith("Bearer realm=")
        error.validate(await resp.json())
    resp = await client.get("/metrics", headers={"Authorization": f"Bearer {admin}"})
    assert resp.status == 200  # the requirement is met: the answer the document describes
    assert "200" in paths["/metrics"]["get"]["responses"]
