"""The Index API (pywb warcserver dialect) over the sample archive."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import MakeClient, leave_mid_answer

# pywb 2.10 warcserver, /pywb/index?url=iana.org over the same files (FIELD-NOTES).
PYWB_IANA = [
    'org,iana)/ 20140126200624 {"url": "http://www.iana.org/", "mime": "text/html", '
    '"status": "200", "digest": "OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB", "length": "2258", '
    '"offset": "334", "filename": "iana.warc.gz", "source": "pywb:iana.cdxj", '
    '"source-coll": "pywb"}',
    'org,iana)/ 20140127171238 {"url": "http://iana.org", "mime": "unk", "status": "302", '
    '"digest": "3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ", "length": "343", "offset": "1858", '
    '"filename": "dupes.warc.gz", "source": "pywb:dupes.cdxj", "source-coll": "pywb"}',
    'org,iana)/ 20140127171238 {"url": "http://www.iana.org/", "mime": "warc/revisit", '
    '"digest": "OSSAPWJ23L56IYVRW3GFEAR4MCJMGPTB", "length": "536", "offset": "2678", '
    '"filename": "dupes.warc.gz", "source": "pywb:dupes.cdxj", "source-coll": "pywb"}',
]


async def test_directory_index_answers_as_pywb(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/pywb/index", params={"url": "iana.org"})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/x-cdxj"
    assert (await resp.text()).splitlines() == PYWB_IANA


@pytest.mark.parametrize(
    ("output", "content_type", "first"),
    [
        ("json", "text/x-ndjson", '{"urlkey": "org,iana)/", "timestamp": "20140126200624"'),
        ("text", "text/plain", "org,iana)/ 20140126200624 http://www.iana.org/ text/html 200"),
        (
            "link",
            "application/link-format",
            '<http://www.iana.org/>; rel="memento"; datetime="Sun, 26 Jan 2014 20:06:24 GMT"; '
            'collection="iana"\n',
        ),
    ],
)
async def test_outputs(
    make_client: MakeClient, sample_yaml: str, output: str, content_type: str, first: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/iana/index", params={"url": "iana.org/", "output": output})
    assert resp.status == 200
    assert resp.headers["Content-Type"] == content_type
    assert (await resp.text()).startswith(first)


async def test_fields_and_filters(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(
        "/pywb/index",
        params=[
            ("url", "iana.org"),
            ("fl", "url,status"),
            ("output", "json"),
            ("filter", "!mime:revisit"),
            ("filter", "=status:302"),
        ],
    )
    assert (await resp.text()).splitlines() == ['{"url": "http://iana.org", "status": "302"}']


async def test_prefix_limit_reverse_and_range(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(
        "/iana/index", params={"url": "http://www.iana.org/_css/*", "output": "json"}
    )
    rows = [json.loads(line) for line in (await resp.text()).splitlines()]
    assert len(rows) > 2
    assert all(row["urlkey"].startswith("org,iana)/_css/") for row in rows)
    assert rows == sorted(rows, key=lambda r: (r["urlkey"], r["timestamp"]))
    resp = await client.get(
        "/iana/index",
        params={
            "url": "http://www.iana.org/_css/*",
            "output": "json",
            "sort": "reverse",
            "limit": "2",
        },
    )
    reverse = [json.loads(line) for line in (await resp.text()).splitlines()]
    assert reverse == rows[::-1][:2]
    resp = await client.get(
        "/iana/index",
        params={
            "url": "iana.org",
            "matchType": "host",
            "from": "20140126200700",
            "to": "20140126200800",
            "output": "json",
        },
    )
    ranged = [json.loads(line) for line in (await resp.text()).splitlines()]
    assert ranged
    assert all("20140126200700" <= r["timestamp"] <= "20140126200800" for r in ranged)


async def test_closest_orders_by_distance(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get(
        "/pywb/index",
        params={"url": "http://www.iana.org/", "closest": "20140127171300", "output": "json"},
    )
    stamps = [json.loads(line)["timestamp"] for line in (await resp.text()).splitlines()]
    assert stamps == ["20140127171238", "20140127171238", "20140126200624"]


async def test_empty_answer_is_200_and_empty(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/pywb/index", params={"url": "http://not-archived.example/"})
    assert resp.status == 200
    assert await resp.text() == ""


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({}, "url"),
        ({"url": "iana.org", "matchType": "bogus"}, "matchType"),
        ({"url": "iana.org", "closest": "abc"}, "closest"),
        ({"url": "iana.org", "limit": "abc"}, "limit"),
        ({"url": "iana.org", "filter": "~url:("}, "filter"),
        ({"url": "iana.org", "output": "xml"}, "output"),
        ({"url": "iana.org", "sources": "nope"}, "sources"),
    ],
)
async def test_bad_input_is_a_400_naming_the_parameter(
    make_client: MakeClient, sample_yaml: str, params: dict[str, str], param: str
) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/pywb/index", params=params)
    assert resp.status == 400
    body = await resp.json()
    assert body["param"] == param
    assert body["message"].startswith(f"{param}: ")


async def test_unknown_collection_is_404(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    resp = await client.get("/nope/index", params={"url": "iana.org"})
    assert resp.status == 404
    assert "unknown collection 'nope'" in (await resp.json())["message"]


async def test_strange_input_never_500(make_client: MakeClient, sample_yaml: str) -> None:
    client = await make_client(sample_yaml)
    for url in ["%", "http://", "::::", "http://[::1", "\x00", "a" * 5000, "*.", "*", "urn:x"]:
        for extra in ({}, {"matchType": "domain"}, {"matchType": "host"}, {"closest": "2014"}):
            resp = await client.get("/pywb/index", params={"url": url, **extra})
            assert resp.status in (200, 400), (url, extra, await resp.text())


async def test_every_source_failed_is_503(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    index = tmp_path / "gone.cdxj"
    shutil.copy(sample_dir / "cdxj" / "iana.cdxj", index)
    client = await make_client(f"collections:\n  gone:\n    index: {index}\n")
    index.unlink()
    resp = await client.get("/gone/index", params={"url": "iana.org"})
    assert resp.status == 503
    body = await resp.json()
    assert set(body["errors"]) == {"gone"}


async def test_group_ties_go_to_the_member_listed_first(
    make_client: MakeClient, sample_dir: Path
) -> None:
    iana = sample_dir / "cdxj" / "iana.cdxj"
    for order in (["zz", "aa"], ["aa", "zz"]):
        client = await make_client(
            f"collections:\n  g:\n    index_group:\n      {order[0]}: {iana}\n"
            f"      {order[1]}: {iana}\n"
        )
        resp = await client.get("/g/index", params={"url": "iana.org/", "output": "json"})
        sources = [json.loads(line)["source"] for line in (await resp.text()).splitlines()]
        assert sources == order
        resp = await client.get(
            "/g/index",
            params={"url": "iana.org/", "output": "json", "closest": "20140126200624"},
        )
        sources = [json.loads(line)["source"] for line in (await resp.text()).splitlines()]
        assert sources == order


async def test_partial_failure_is_reported_in_a_header(
    make_client: MakeClient, sample_dir: Path, tmp_path: Path
) -> None:
    index = tmp_path / "gone.cdxj"
    shutil.copy(sample_dir / "cdxj" / "example.cdxj", index)
    client = await make_client(
        f"collections:\n  g:\n    index_group:\n      ok: {sample_dir}/cdxj/iana.cdxj\n"
        f"      gone: {index}\n"
    )
    index.unlink()
    resp = await client.get("/g/index", params={"url": "iana.org"})
    assert resp.status == 200
    assert len((await resp.text()).splitlines()) == 1
    assert set(json.loads(resp.headers["ResErrors"])) == {"gone"}
    resp = await client.get("/g/index", params={"url": "iana.org", "sources": "ok"})
    assert "ResErrors" not in resp.headers


async def test_sequence_falls_through_empty_steps(
    make_client: MakeClient, sample_dir: Path
) -> None:
    client = await make_client(
        f"collections:\n  s:\n    sequence:\n      - name: first\n"
        f"        index: {sample_dir}/cdxj/example.cdxj\n"
        f"      - name: second\n        index: {sample_dir}/cdxj/iana.cdxj\n"
    )
    resp = await client.get("/s/index", params={"url": "iana.org/", "output": "json"})
    assert resp.headers["Warcserver-Step"] == "second"
    assert [json.loads(line)["source"] for line in (await resp.text()).splitlines()] == ["second"]
    resp = await client.get("/s/index", params={"url": "example.com/?example=1"})
    assert resp.headers["Warcserver-Step"] == "first"


def _long_index(path: Path, lines: int) -> Path:
    """``lines`` captures of example.com pages, sorted (~200 bytes of CDXJ each)."""
    path.write_text(
        "".join(
            f'com,example)/p{i:06d} 20140101000000 {{"url": "http://example.com/p{i:06d}", '
            f'"mime": "text/html", "status": "200", "digest": "D{i:06d}", "length": "100", '
            f'"offset": "{i * 100}", "filename": "big.warc.gz"}}\n'
            for i in range(lines)
        ),
        "utf-8",
    )
    return path


@pytest.mark.parametrize("output", ["cdxj", "link"])
async def test_long_answers_stream_and_short_ones_go_in_one_piece(
    make_client: MakeClient, tmp_path: Path, output: str
) -> None:
    big = _long_index(tmp_path / "big.cdxj", 2_000)  # ~480 KB of answer: several pieces
    client = await make_client(f"collections:\n  big:\n    index: {big}\n")
    whole = await client.get(
        "/big/index", params={"url": "example.com/", "matchType": "prefix", "output": output}
    )
    assert whole.status == 200
    assert whole.headers.get("Transfer-Encoding") == "chunked"
    assert whole.headers["Access-Control-Allow-Origin"] == "*"  # set before it streamed
    text = await whole.text()
    one = await client.get("/big/index", params={"url": "example.com/p000007", "output": output})
    assert one.headers["Content-Length"] == str(len(await one.read()))
    if output == "link":
        # one link per capture, separated by ",\n" across piece boundaries, "\n" at the end
        links = text.split(",\n")
        assert len(links) == 2_000
        assert text.endswith("\n")
        assert not text.endswith(",\n")
        assert links[7] == (await one.text()).rstrip("\n")
    else:
        lines = text.splitlines()
        assert len(lines) == 2_000
        assert text.endswith("\n")
        assert lines[7] == (await one.text()).rstrip("\n")
        assert [json.loads(line.split(" ", 2)[2])["offset"] for line in lines[:3]] == [
            "0",
            "100",
            "200",
        ]


async def test_a_client_leaving_mid_answer_is_not_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # ~40 MB of answer: more than the socket buffers hold, so the server is
    # still writing when the client goes away.
    big = _long_index(tmp_path / "big.cdxj", 200_000)
    await leave_mid_answer(
        f"collections:\n  big:\n    index: {big}\n",
        "/big/index?url=example.com/&matchType=prefix",
        caplog,
        expect_log="client left during GET /big/index",
    )
