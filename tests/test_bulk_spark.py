"""``python -m bulk.spark`` on Spark's local mode writes what ``bulk.embed`` writes, and ``embed_texts`` embeds a DataFrame.

One Spark session for the module (the JVM's start is most of the time here), the model shipped to the
executors as on a cluster; Java 17+ from Debian's packages (``make java``).
"""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bulk import embed
from bulk import spark as spark_job
from tests.reference import TEXTS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    assert shutil.which("java"), "pyspark needs Java 17 or later: make java"
    session = spark_job.session("local[2]")
    yield session
    gateway = session.sparkContext._gateway
    session.stop()
    gateway.shutdown()
    gateway.proc.stdin.close()  # the JVM ends when its stdin does: none left for the tests after these
    gateway.proc.wait(timeout=30)
    type(session.sparkContext)._gateway = type(session.sparkContext)._jvm = None


def written(directory) -> tuple[dict, pa.Table, list[str]]:
    """The manifest, the parts as one table, and the rejects' lines."""
    manifest = json.loads((directory / "manifest.json").read_text())
    table = pa.concat_tables(pq.read_table(directory / part["file"]) for part in manifest["parts"])
    rejects = [line for part in manifest["parts"] for line in (directory / part["rejects"]).read_text().splitlines()]
    return manifest, table, rejects


def both(tag: str, corpus, directory, *options: str) -> tuple[dict, dict]:
    """bulk.embed's and bulk.spark's summaries on ``corpus``, once their files are held equal."""
    common = ["--model", tag, "--input", str(corpus), "--id-field", "id", "--backend", "onnx-int8", "--window", "8", *options]
    single = embed.main([*common, "--output", str(directory / "single")])
    summary = spark_job.main(["--master", "local[2]", "--ship", "yes", *common, "--output", str(directory / "spark")])
    manifest, table, rejects = written(directory / "spark")
    expected_manifest, expected, expected_rejects = written(directory / "single")
    assert manifest["job"] == expected_manifest["job"] and manifest["parts"] == expected_manifest["parts"]
    assert table["id"] == expected["id"] and table["tokens"] == expected["tokens"]
    assert table.schema == expected.schema and table.schema.metadata == expected.schema.metadata
    vectors, reference = (np.stack(t["vector"].to_numpy(zero_copy_only=False)) for t in (table, expected))
    if vectors.dtype == np.float32:
        assert (np.sum(vectors * reference, axis=1) >= 0.99999).all()  # unit vectors: the cosine
    else:  # int8: the same float vectors to 1e-5 (cosine), so a value may sit one step apart at most
        assert np.abs(vectors.astype(int) - reference).max() <= 1 and (vectors == reference).mean() > 0.99
    assert rejects == expected_rejects
    counts = ("embedded", "rejected", "rejected_by_reason")
    assert {key: summary[key] for key in counts} == {key: single[key] for key in counts}
    return single, summary


def test_a_jsonl_corpus_gets_bulk_embeds_files_and_each_worker_loads_the_model_once(spark, embed_tag, tmp_path):
    good = [{"id": f"doc-{i}", "text": f"{TEXTS[i % 5][:300]} ({i})"} for i in range(30)]
    lines = [json.dumps(row) for row in good[:10]]
    lines += ['{"id": "no-text"}', '{"id": "number", "text": 5}', '{"id": "blank", "text": "  "}', "{not json", "[1, 2]", " \t"]
    lines += [json.dumps({"id": "surrogate", "text": "a \ud800"}), json.dumps({"id": 7, "text": "an integer id"})]
    lines += [json.dumps({"id": "long", "text": TEXTS[3]})] + [json.dumps(row) for row in good[10:]]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(("\n".join(lines) + "\n").encode().replace(b'"number"', b'"numb\xffr"'))  # one byte UTF-8 cannot decode

    single, summary = both(embed_tag, corpus, tmp_path, "--no-truncate")

    assert summary["embedded"] == 30 and summary["rejected"] == 8 and summary["rejected_by_reason"]["not UTF-8"] == 1
    # 5 windows, 5 tasks, on at most 2 Python workers, each of which loaded the model once
    assert summary["spark"]["partitions"] == 5 and summary["spark"]["model_loads"] == summary["spark"]["python_workers"] <= 2


def test_csv_and_parquet_corpora_get_bulk_embeds_files_and_rejects_and_compact_vectors(spark, embed_tag, tmp_path):
    with (tmp_path / "corpus.csv").open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "text"])
        writer.writerows([i, f'{TEXTS[i % 3]}, "quoted"\nand a break {i}'] for i in range(12))
        writer.writerows([[12, ""], [13], ["", "no id"]])
    texts = [f"{TEXTS[i % 3]} number {i}" if i % 7 else (None if i % 2 else "") for i in range(20)]
    pq.write_table(pa.table({"id": list(range(20)), "text": texts}), tmp_path / "corpus.parquet", row_group_size=6)

    for name, options in (("corpus.csv", []), ("corpus.parquet", ["--vector-type", "int8"])):
        (tmp_path / name.split(".")[1]).mkdir()
        single, _ = both(embed_tag, tmp_path / name, tmp_path / name.split(".")[1], *options)
        assert single["rejected"] == 3


def test_it_resumes_after_the_parts_bulk_embed_finished(spark, embed_tag, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": f"{TEXTS[i % 3]} number {i}"}) + "\n" for i in range(30)))
    args = ["--model", embed_tag, "--input", str(corpus), "--output", str(tmp_path / "out"), "--backend", "onnx-int8", "--window", "8"]
    embed.main(args)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (tmp_path / "out" / "manifest.json").write_text(json.dumps({"job": manifest["job"], "parts": manifest["parts"][:2]}))
    first = (tmp_path / "out" / "part-00000.parquet").stat().st_mtime_ns

    summary = spark_job.main(["--master", "local[2]", "--ship", "yes", *args])

    assert summary["resumed_after_rows"] == 16 and summary["embedded"] == 14
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["parts"] == manifest["parts"]
    assert (tmp_path / "out" / "part-00000.parquet").stat().st_mtime_ns == first
    with pytest.raises(SystemExit, match="another job's output .*backend: onnx-int8 in the manifest, onnx here"):
        spark_job.main(["--master", "local[2]", "--ship", "yes", *args[:-3], "onnx", *args[-2:]])


def test_an_executor_that_would_compute_otherwise_writes_no_part(embed_tag, tmp_path):
    directory = str(spark_job.model_directory(embed_tag))
    model = spark_job.Model(directory, False, "onnx-int8", "", None, True, 2048, 1, computes=("onnx-int8", "int8 (other kernels)"))
    with pytest.raises(RuntimeError, match=r"this executor computes with onnx-int8 int8 \(u8×[su]8\), the job with onnx-int8 int8 \(other"):
        list(spark_job.written([(0, (0, "0", "a text", None))], model, str(tmp_path), 8, "int"))
    assert not list(tmp_path.iterdir())


def test_embed_texts_adds_vectors_to_a_dataframe(spark, embed_tag):
    texts = [f"{TEXTS[i % 5][:300]} ({i})" for i in range(3)]
    frame = spark.createDataFrame(
        [(f"doc-{i}", text) for i, text in enumerate(texts)] + [("null", None), ("blank", " ")], "id string, text string"
    )

    rows = {row["id"]: row for row in spark_job.embed_texts(frame, embed_tag, backend="onnx-int8", ship=True).collect()}

    expected = spark_job.Model(str(spark_job.model_directory(embed_tag)), False, "onnx-int8", "", None, True, 2048, 1).embedder()
    reference = expected.vectors(expected.tokenizer.encode(texts))
    for i, vector in enumerate(reference):
        assert float(np.dot(rows[f"doc-{i}"]["vector"], vector)) >= 0.99999 and rows[f"doc-{i}"]["reason"] is None
    assert {key: (row["vector"], row["tokens"], row["reason"]) for key, row in rows.items() if key in ("null", "blank")} == {
        "null": (None, None, "no 'text' field"),
        "blank": (None, None, "'text' is empty"),
    }
    with pytest.raises(ValueError, match="embed_texts writes float32 vectors"):
        spark_job.embed_texts(frame, embed_tag, vector_type="int8")


def test_a_dry_run_counts_measures_one_task_and_writes_nothing(spark, embed_tag, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"{TEXTS[i % 3]} number {i}"}) + "\n" for i in range(300)))
    common = ["--master", "local[2]", "--model", embed_tag, "--input", str(corpus), "--backend", "onnx-int8"]

    plan = spark_job.main([*common, "--output", str(tmp_path / "out"), "--dry-run"])

    assert plan["rows"] == 300 and plan["task_slots"] == 2 and plan["texts_per_s_per_task"] > 0, plan
    assert abs(plan["estimated_s"] - 300 / (plan["texts_per_s_per_task"] * 2)) <= 1
    assert plan["vector_bytes"] == 300 * 384 * 4 and plan["backend"].startswith("onnx-int8")
    assert not (tmp_path / "out").exists()
