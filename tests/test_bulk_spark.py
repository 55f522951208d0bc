"""``python -m bulk.spark`` on Spark's local mode writes what ``bulk.embed`` writes, and ``embed_texts`` embeds a DataFrame.

One Spark session for both (the JVM's start is most of the time here); Java 17+ from Debian's packages (``make java``).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bulk import embed
from bulk import spark as spark_job
from tests.reference import TEXTS

pytestmark = pytest.mark.slow


def written(directory) -> tuple[dict, pa.Table, list[str]]:
    """The manifest, the parts as one table, and the rejects' lines."""
    manifest = json.loads((directory / "manifest.json").read_text())
    table = pa.concat_tables(pq.read_table(directory / part["file"]) for part in manifest["parts"])
    rejects = [line for part in manifest["parts"] for line in (directory / part["rejects"]).read_text().splitlines()]
    return manifest, table, rejects


def test_spark_local_writes_what_bulk_embed_writes_and_embeds_a_dataframe(embed_tag, tmp_path):
    good = [{"id": f"doc-{i}", "text": f"{TEXTS[i % 5][:300]} ({i})"} for i in range(30)]
    lines = [json.dumps(row) for row in good[:10]]
    lines += ['{"id": "no-text"}', '{"id": "number", "text": 5}', '{"id": "blank", "text": "  "}', "{not json", "[1, 2]", " \t"]
    lines += [json.dumps({"id": "long", "text": TEXTS[3]})] + [json.dumps(row) for row in good[10:]]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    common = ["--model", embed_tag, "--input", str(corpus), "--id-field", "id", "--backend", "onnx-int8", "--window", "8", "--no-truncate"]
    single = embed.main([*common, "--output", str(tmp_path / "single")])

    session = spark_job.session("local[2]")
    frame = session.createDataFrame(
        [(row["id"], row["text"]) for row in good[:3]] + [("null", None), ("blank", " ")], "id string, text string"
    )
    rows = spark_job.embed_texts(frame, embed_tag, backend="onnx-int8").orderBy("id").collect()
    summary = spark_job.main(["--master", "local[2]", "--ship", "yes", *common, "--output", str(tmp_path / "spark")])  # stops the session

    manifest, table, rejects = written(tmp_path / "spark")
    expected_manifest, expected, expected_rejects = written(tmp_path / "single")
    assert manifest["job"] == expected_manifest["job"] and manifest["parts"] == expected_manifest["parts"]
    assert table["id"].to_pylist() == [row["id"] for row in good] == expected["id"].to_pylist()
    assert table.schema == expected.schema and table.schema.metadata == expected.schema.metadata
    vectors, reference = (np.stack(t["vector"].to_numpy(zero_copy_only=False)) for t in (table, expected))
    assert (np.sum(vectors * reference, axis=1) >= 0.99999).all()  # unit vectors: the cosine
    assert table["tokens"] == expected["tokens"]
    assert rejects == expected_rejects and len(rejects) == 6
    assert {key: summary[key] for key in ("embedded", "rejected", "rejected_by_reason")} == {
        key: single[key] for key in ("embedded", "rejected", "rejected_by_reason")
    }
    # 5 windows, 5 tasks, on 2 Python workers that each loaded the model once (for embed_texts, then kept)
    assert summary["spark"]["partitions"] == 5 and summary["spark"]["model_loads"] == summary["spark"]["python_workers"] <= 2

    by_id = dict(zip(expected["id"].to_pylist(), reference, strict=True))
    embedded = [row for row in rows if row["reason"] is None]
    assert sorted(row["id"] for row in embedded) == sorted(row["id"] for row in good[:3])
    assert all(float(np.dot(row["vector"], by_id[row["id"]])) >= 0.99999 and row["tokens"] > 2 for row in embedded)
    assert {row["id"]: row["reason"] for row in rows if row["reason"]} == {"null": "no 'text' field", "blank": "'text' is empty"}
    assert all(row["vector"] is None for row in rows if row["reason"])
