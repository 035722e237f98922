"""Access control inside collections: sequences, index groups, fuzzy matches,
the user header, the 451 body and /metrics."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from tests.conftest import MakeClient

CSS = "http://www.iana.org/_css/2013.1/screen.css"


def _config(sample: Path, acl: Path, body: str, extra: str = "") -> str:
    return f"{extra}collections:\n  c:\n{body}    acl_paths: {acl}\n"


async def test_an_excluded_capture_of_step_one_does_not_hide_step_two(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    # step 1 holds example.com in 2014, step 2 in 2016; the 2014 captures are excluded
    acl = tmp_path / "rules.aclj"
    acl.write_text('com,example)/ - {"access": "allow", "after": "2015"}\n')
    s = sample_dir
    steps = (
        "    sequence:\n"
        f"      - {{name: old, index: {s}/cdxj/dupes.cdxj, resource: {s}/warcs/}}\n"
        f"      - {{name: new, index: {s}/cdxj/example2.cdxj, resource: {s}/warcs/}}\n"
        "    default_access: exclude\n"
    )
    client = await make_client(_config(sample_dir, acl, steps))
    resp = await client.get("/c/index", params={"url": "example.com"})
    lines = (await resp.text()).splitlines()
    assert [line.split(" ")[1] for line in lines] == ["20160225042329"]
    resp = await client.get("/c/resource", params={"url": "http://example.com/"})
    assert resp.status == 200, await resp.text()
    assert resp.headers["Memento-Datetime"] == "Thu, 25 Feb 2016 04:23:29 GMT"


async def test_an_index_group_merges_only_what_each_member_may_show(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    acl = tmp_path / "rules.aclj"
    acl.write_text('com,example)/ - {"access": "block", "before": "2015"}\n')
    group = (
        "    index_group:\n"
        f"      old: {sample_dir}/cdxj/dupes.cdxj\n"
        f"      new: {sample_dir}/cdxj/example2.cdxj\n"
        f"    resource: {sample_dir}/warcs/\n"
        "    default_access: exclude\n"
    )
    client = await make_client(_config(sample_dir, acl, group))
    resp = await client.get("/c/index", params={"url": "example.com", "output": "json"})
    listed = [json.loads(line) for line in (await resp.text()).splitlines()]
    assert [(r["timestamp"], r["access"], r["source"]) for r in listed] == [
        ("20140127171200", "block", "old"),
        ("20140127171251", "block", "old"),
    ]
    resp = await client.get("/c/resource", params={"url": "example.com"})
    assert resp.status == 451
    assert await resp.json() == {
        "message": "access to the capture of http://example.com at 20140127171200 is blocked",
        "access": "block",
    }


async def test_a_fuzzy_match_is_checked_as_any_capture(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    acl = tmp_path / "rules.aclj"
    acl.write_text('org,iana)/_css - {"access": "exclude"}\n')
    body = f"    index: {sample_dir}/cdxj/iana.cdxj\n    resource: {sample_dir}/warcs/\n"
    client = await make_client(_config(sample_dir, acl, body))
    open_client = await make_client(
        f"collections:\n  c:\n    index: {sample_dir}/cdxj/iana.cdxj\n"
        f"    resource: {sample_dir}/warcs/\n"
    )
    widened = {"url": f"{CSS}?_=1390766400"}
    assert (await (await open_client.get("/c/index", params=widened)).text()).strip()
    assert (await open_client.get("/c/resource", params=widened)).status == 200
    assert not (await (await client.get("/c/index", params=widened)).text()).strip()
    assert (await client.get("/c/resource", params=widened)).status == 404


async def test_no_client_header_names_a_user_unless_the_operator_says_which(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    acl = tmp_path / "rules.aclj"
    acl.write_text(
        'org,iana)/about - {"access": "exclude"}\n'
        'org,iana)/about - {"access": "allow", "user": "staff"}\n'
    )
    body = f"    index: {sample_dir}/cdxj/iana.cdxj\n    resource: {sample_dir}/warcs/\n"
    about = {"url": "http://www.iana.org/about"}
    for header in ("X-Pywb-ACL-User", "X-Acl-User", "X-Remote-User"):
        client = await make_client(_config(sample_dir, acl, body))
        resp = await client.get("/c/resource", params=about, headers={header: "staff"})
        assert resp.status == 404, header
    trusted = await make_client(
        _config(sample_dir, acl, body, "access:\n  user_header: X-Acl-User\n")
    )
    assert (await trusted.get("/c/resource", params=about)).status == 404
    assert (
        await trusted.get("/c/resource", params=about, headers={"X-Acl-User": "staff"})
    ).status == 200
    other = {"X-Pywb-ACL-User": "staff"}
    assert (await trusted.get("/c/resource", params=about, headers=other)).status == 404


async def test_metrics_count_rules_and_decisions(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    acl = tmp_path / "rules.aclj"
    acl.write_text(
        'org,iana)/about - {"access": "block", "message": "Withdrawn at the owner\'s request"}\n'
        'org,iana)/_css - {"access": "exclude"}\n'
    )
    body = f"    index: {sample_dir}/cdxj/iana.cdxj\n    resource: {sample_dir}/warcs/\n"
    client = await make_client(_config(sample_dir, acl, body))
    await client.get("/c/index", params={"url": "iana.org", "matchType": "domain"})
    resp = await client.get("/c/resource", params={"url": "http://www.iana.org/about"})
    assert resp.status == 451
    assert (await resp.json())["message"] == "Withdrawn at the owner's request"
    text = await (await client.get("/metrics")).text()
    assert 'gateway_access_rules{collection="c"} 2.0' in text
    counts = {
        access: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gateway_access_decisions_total{")
        for access in ("allow", "block", "exclude")
        if f'access="{access}"' in line
    }
    assert counts["allow"] > 50, counts
    assert counts["block"] >= 2, counts
    assert counts["exclude"] >= 10, counts


async def test_the_page_shows_a_blocked_captures_message(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    acl = tmp_path / "rules.aclj"
    acl.write_text(
        'org,iana)/ - {"access": "block", "before": "20140126201000", '
        '"message": "Embargoed by the depositor"}\n'
    )
    body = f"    index: {sample_dir}/cdxj/iana.cdxj\n    resource: {sample_dir}/warcs/\n"
    client = await make_client(_config(sample_dir, acl, body))
    resp = await client.get(
        "/c/",
        params={"url": "http://www.iana.org/", "day": "20140126"},
        headers={"Accept": "text/html"},
    )
    page = await resp.text()
    assert resp.status == 200
    assert "Embargoed by the depositor" in page  # the blocked capture of 20:06:24
    assert "20140126200624id_/" not in page  # listed, without a link that would load it


async def test_post_request_routes_obey_the_same_rules(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    acl = tmp_path / "rules.aclj"
    acl.write_text(
        'org,iana)/about - {"access": "block"}\norg,iana)/_css - {"access": "exclude"}\n'
    )
    body = f"    index: {sample_dir}/cdxj/iana.cdxj\n    resource: {sample_dir}/warcs/\n"
    client = await make_client(_config(sample_dir, acl, body))
    for route in ("resource/postreq", "postreq/resource", "resource-post"):
        about = b"GET /about HTTP/1.1\r\nHost: www.iana.org\r\n\r\n"
        assert (await client.post(f"/c/{route}", data=about)).status == 451, route
        css = b"GET /_css/2013.1/print.css HTTP/1.1\r\nHost: www.iana.org\r\n\r\n"
        assert (await client.post(f"/c/{route}", data=css)).status == 404, route
    css = b"GET /_css/2013.1/print.css HTTP/1.1\r\nHost: www.iana.org\r\n\r\n"
    resp = await client.post("/c/index/postreq", data=css)
    assert resp.status == 200
    assert not (await resp.text()).strip()


async def test_an_export_leaves_out_what_the_rules_hide_or_block(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    # the home page's captures before 20:10 are blocked, its CSS excluded
    acl = tmp_path / "rules.aclj"
    acl.write_text(
        'org,iana)/_css/2013.1/screen.css - {"access": "exclude"}\n'
        'org,iana)/ - {"access": "block", "before": "20140126201000"}\n'
    )
    body = f"    index: {sample_dir}/cdxj/iana.cdxj\n    resource: {sample_dir}/warcs/\n"
    client = await make_client(_config(sample_dir, acl, body))
    listed = await client.get("/c/index", params={"url": "iana.org", "matchType": "prefix"})
    lines = (await listed.text()).splitlines()
    blocked = [line for line in lines if '"access": "block"' in line]
    assert blocked
    assert not any("screen.css" in line for line in lines)
    resp = await client.get("/c/export.wacz", params={"url": "iana.org", "matchType": "prefix"})
    assert resp.status == 200, await resp.text()
    with zipfile.ZipFile(io.BytesIO(await resp.read())) as wacz:
        index = wacz.read("indexes/index.cdx").decode().splitlines()
        log = wacz.read("logs/export.log").decode()
    exported = {(line.split(" ")[0], line.split(" ")[1]) for line in index}
    for line in blocked:
        assert (line.split(" ")[0], line.split(" ")[1]) not in exported
    assert not any("screen.css" in line for line in index)
    assert len(exported) == len(lines) - len(blocked)
    summary = json.loads(log.splitlines()[-1])["details"]
    assert summary["skipped"] == 0  # left out by the rules, not failures to load
    assert summary["refused"] >= len(blocked)  # blocked captures and blocked originals
