"""Side by side with pywb 2.10's warcserver: the same .aclj files, default_access
and embargo on both, the same statuses and index lines on /index and /resource.

The gateway is told to trust pywb's own user header (``access.user_header:
X-Pywb-ACL-User``), so one request names the same user to both.

One deliberate difference is let through and counted: a revisit whose
original is excluded is not served here (pywb looks the original up without
its access check and serves it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import PYWB_BIN, MakeClient, _http_get, _start_until_ready

pytestmark = pytest.mark.peer

USER_HEADER = "X-Pywb-ACL-User"
#: Lines in reverse order, as pywb's binary search needs them.
RULES = """\
org,iana)/about - {"access": "block", "url": "http://www.iana.org/about"}
org,iana)/_js - {"access": "exclude"}
org,iana)/_js - {"access": "allow", "user": "staff"}
org,iana)/_img/2013.1/iana-logo-header.svg### - {"access": "allow"}
org,iana)/_img - {"access": "exclude"}
org,iana)/_css - {"access": "allow", "before": "20140126200700"}
"""
#: name -> (acl_paths?, default_access, embargo)
COLLECTIONS: dict[str, tuple[bool, str, dict[str, object] | None]] = {
    "acl": (True, "allow", None),
    "aclblock": (True, "block", None),
    "embargo": (False, "allow", {"before": "20140126200800"}),
    "both": (True, "allow", {"after": "20140126201000"}),
}


@pytest.fixture(scope="module")
def acl_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("acl") / "rules.aclj"
    path.write_text(RULES)
    return path


def _pywb_config(sample: Path, acl: Path) -> str:
    collections = {}
    for name, (with_acl, default, embargo) in COLLECTIONS.items():
        entry: dict[str, object] = {
            "index": str(sample / "cdxj" / "iana.cdxj"),
            "archive_paths": str(sample / "warcs") + "/",
            "default_access": default,
        }
        if with_acl:
            entry["acl_paths"] = [str(acl)]
        if embargo:
            entry["embargo"] = dict(embargo)
        collections[name] = entry
    return json.dumps({"collections": collections}, indent=2)


def _gateway_config(sample: Path, acl: Path) -> str:
    lines = ["access:", f"  user_header: {USER_HEADER}", "collections:"]
    for name, (with_acl, default, embargo) in COLLECTIONS.items():
        lines += [
            f"  {name}:",
            f"    index: {sample}/cdxj/iana.cdxj",
            f"    resource: {sample}/warcs/",
            f"    default_access: {default}",
        ]
        if with_acl:
            lines.append(f"    acl_paths: [{acl}]")
        if embargo:
            lines.append(f"    embargo: {json.dumps(embargo)}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def pywb_acl(
    tmp_path_factory: pytest.TempPathFactory, sample_dir: Path, acl_file: Path
) -> Iterator[str]:
    binary = PYWB_BIN / "warcserver"
    if not os.access(binary, os.X_OK):
        pytest.fail(f"pywb is not installed: {binary} is missing; run scripts/install-peers")
    workdir = tmp_path_factory.mktemp("pywb-acl")
    (workdir / "config.yaml").write_text(_pywb_config(sample_dir, acl_file))
    env = dict(os.environ, PYWB_CONFIG_FILE=str(workdir / "config.yaml"))

    def ready(port: int) -> bool:
        answer = _http_get(port, "/")
        return answer is not None and answer[0] == 200 and b"/both" in answer[1]

    server, port = _start_until_ready(
        "pywb-acl", lambda p: [str(binary), "-b", "127.0.0.1", "-p", str(p)], workdir, ready, env
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def _urls(sample_dir: Path) -> list[str]:
    urls: list[str] = []
    for line in (sample_dir / "cdxj" / "iana.cdxj").read_text().splitlines():
        url = json.loads(line.split(" ", 2)[2])["url"]
        if url not in urls:
            urls.append(url)
    return urls


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


async def test_index_and_resource_answer_as_pywb_with_the_same_rules(
    make_client: MakeClient, sample_dir: Path, acl_file: Path, pywb_acl: str
) -> None:
    client = await make_client(_gateway_config(sample_dir, acl_file))
    statuses: dict[int, int] = {}
    accesses: set[str] = set()
    revisits_of_denied: set[tuple[str, str]] = set()
    async with aiohttp.ClientSession() as session:
        for coll in COLLECTIONS:
            for user in (None, "staff"):
                headers = {USER_HEADER: user} if user else {}
                queries = [{"url": url} for url in _urls(sample_dir)]
                queries += [
                    {"url": "iana.org", "matchType": "domain"},
                    {"url": "http://www.iana.org/_js/*"},
                    {"url": "http://www.iana.org/_css/*", "output": "json"},
                ]
                for params in queries:
                    what = (coll, user, params)
                    async with session.get(
                        f"{pywb_acl}/{coll}/index", params=params, headers=headers
                    ) as ref:
                        want_status, want = ref.status, await ref.text()
                    resp = await client.get(f"/{coll}/index", params=params, headers=headers)
                    assert resp.status == want_status, what
                    got = await resp.text()
                    assert _lines(got) == _lines(want), what
                    accesses |= {
                        json.loads(
                            line.split(" ", 2)[2] if params.get("output") != "json" else line
                        ).get("access", "")
                        for line in _lines(got)
                    }
                    if "matchType" in params or params["url"].endswith("*"):
                        continue
                    async with session.get(
                        f"{pywb_acl}/{coll}/resource", params=params, headers=headers
                    ) as ref:
                        want_status, want_body = ref.status, await ref.read()
                    resp = await client.get(f"/{coll}/resource", params=params, headers=headers)
                    if resp.status == 404 and want_status == 200:
                        # A deliberate difference: the original of a revisit is checked
                        # too, and pywb serves a revisit whose original is excluded.
                        assert "with digest" in await resp.text(), what
                        revisits_of_denied.add((coll, params["url"]))
                        continue
                    assert resp.status == want_status, (what, await resp.text())
                    if want_status == 200:
                        assert await resp.read() == want_body, what
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
    # every kind of answer was compared: served, blocked (451) and excluded (404)
    assert {200, 451, 404} <= set(statuses), statuses
    assert {"allow", "block"} <= accesses
    # only where an embargo excludes the originals (iana's early captures)
    assert {coll for coll, _ in revisits_of_denied} <= {"embargo"}, revisits_of_denied
