"""The typed rows of the store's object types: what earlier releases stored reads, and
is written again byte for byte; a row survives a trip through its table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.jobs.columns import STRINGS, Codec
from gateway.jobs.db import read_object, utcnow, write_object
from gateway.jobs.model import ObjectType
from gateway.jobs.schema import connect, create_schema
from gateway.store.job_rows import (
    FILE_IDS,
    GROUPS,
    OUTCOMES,
    REASONS,
    SCRUB_PROBLEMS,
    TODO,
    BatchColumns,
    CopyColumns,
    CopyGroup,
    CopyTodo,
    GroupFile,
    ScrubColumns,
    ScrubProblem,
)
from gateway.store.object_types import BATCH, COPY, SCRUB

#: JSON as the releases before typed rows wrote it (``json.dumps``, default separators).
STORED: list[tuple[Codec[Any], str]] = [
    (
        SCRUB_PROBLEMS,
        '[{"kind": "digest", "offset": 120, "message": "payload digest mismatch"},'
        ' {"kind": "index", "offset": null, "message": "2 index rows left over"}]',
    ),
    (FILE_IDS, "[3, 1, 2]"),
    (
        GROUPS,
        '[["primary", "backup", 1700000000.25, [["a.warc.gz", false], ["b.warc.gz", true]]]]',
    ),
    (TODO, '[["a.warc.gz", false, 1700000000.25], ["b.warc.gz", true, 1700000001.5]]'),
    (OUTCOMES, '{"copied": 2, "deferred": 1, "retry": 1}'),
    (REASONS, '{"b.warc.gz": ["no space left", "refused"], "a.warc.gz": ["backup: down"]}'),
    (STRINGS, '["a note", "another note"]'),
]


@pytest.mark.parametrize(("codec", "text"), STORED, ids=[t for _, t in STORED])
def test_stored_json_reads_and_is_written_again_byte_for_byte(codec: Codec[Any], text: str) -> None:
    assert codec.encode(codec.decode(text)) == text


@pytest.mark.parametrize("codec", [c for c, _ in STORED])
def test_an_empty_value_is_the_column_default(codec: Codec[Any]) -> None:
    empty = codec.decode("{}" if codec in (OUTCOMES, REASONS) else "[]")
    assert codec.encode(empty) in ("[]", "{}")


def test_structured_values_decode_to_their_records() -> None:
    assert GROUPS.decode(STORED[2][1]) == (
        CopyGroup(
            "primary",
            "backup",
            1700000000.25,
            (GroupFile("a.warc.gz", False), GroupFile("b.warc.gz", True)),
        ),
    )
    assert TODO.decode(STORED[3][1])[1] == CopyTodo("b.warc.gz", True, 1700000001.5)
    assert SCRUB_PROBLEMS.decode(STORED[0][1])[1] == ScrubProblem(
        "index", None, "2 index rows left over"
    )
    # The order a batch met its problems in is kept (its result names the first three).
    assert list(REASONS.decode(STORED[5][1])) == ["b.warc.gz", "a.warc.gz"]


ROWS: list[Any] = [
    ScrubColumns(
        file_name="a.warc.gz",
        pass_problems=(ScrubProblem("digest", 120, "payload digest mismatch"),),
        problems=(ScrubProblem("index", None, "left over"),),
    ),
    BatchColumns(
        pass_id="store-1",
        file_ids=(3, 1),
        replace_conflicts=True,
        outcomes={"copied": 1},
        problems={"a.warc.gz": ("down",)},
        pending=GROUPS.decode(STORED[2][1]),
    ),
    CopyColumns(
        batch_id=1,
        source="primary",
        destination="backup",
        mtime=1700000000.25,
        files=("a.warc.gz", "b.warc.gz"),
        todo=TODO.decode(STORED[3][1]),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: type(r).__name__)
def test_a_row_survives_its_table(row: Any, tmp_path: Path) -> None:
    by_row: dict[type, ObjectType[Any]] = {
        ScrubColumns: SCRUB,
        BatchColumns: BATCH,
        CopyColumns: COPY,
    }
    object_type = by_row[type(row)]
    conn = connect(tmp_path / "rows.sqlite3")
    create_schema(conn, [object_type])
    object_id = write_object(conn, object_type, utcnow(), row)
    assert read_object(conn, object_type, object_id).row == row
    stored = conn.execute(
        f"SELECT {', '.join(c for c, _ in object_type.columns)} FROM {object_type.table}"
    ).fetchone()
    assert dict(zip([c for c, _ in object_type.columns], stored, strict=True)) == (
        object_type.encode(row)
    )
    conn.close()
