"""``python -m bulk.embed``: a corpus to Parquet vectors equal to the server's, bad rows kept aside, resumable."""

from __future__ import annotations

import csv
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from bulk import embed
from bulk.corpus import Output
from bulk.embedder import vector_type_problem
from tests.reference import TEXTS

pytestmark = pytest.mark.slow


def vectors_of(directory) -> tuple[list, np.ndarray]:
    table = pa.concat_tables(
        pq.read_table(directory / part["file"]) for part in json.loads((directory / "manifest.json").read_text())["parts"]
    )
    return table["id"].to_pylist(), np.stack(table["vector"].to_numpy(zero_copy_only=False))


def test_a_corpus_gets_the_servers_vectors_and_its_bad_rows_a_reason(embed_tag, embed_url, tmp_path):
    good = [{"id": f"doc-{i}", "text": f"{TEXTS[i % 5][:300]} ({i})"} for i in range(30)]
    lines = [json.dumps(row) for row in good[:10]]
    lines += ['{"id": "no-text"}', '{"id": "number", "text": 5}', '{"id": "blank", "text": "  "}', "{not json", "[1, 2]"]
    lines += [json.dumps({"id": "long", "text": TEXTS[3]})] + [json.dumps(row) for row in good[10:]]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    card = requests.get(f"{embed_url}/v1/models", timeout=30).json()["data"][0]
    common = ["--model", embed_tag, "--input", str(corpus), "--id-field", "id", "--backend", card["backend"], "--window", "8"]

    summary = embed.main([*common, "--output", str(tmp_path / "out"), "--no-truncate"])

    ids, vectors = vectors_of(tmp_path / "out")
    assert ids == [row["id"] for row in good]
    served = requests.post(f"{embed_url}/v1/embeddings", json={"input": [row["text"] for row in good]}, timeout=60).json()["data"]
    expected = np.array([item["embedding"] for item in served], dtype=np.float32)
    assert (np.sum(vectors * expected, axis=1) >= 0.99999).all()  # unit vectors: the cosine
    rejects = [json.loads(line) for path in sorted((tmp_path / "out").glob("rejects-*.jsonl")) for line in path.read_text().splitlines()]
    assert [(reject["row"], reject["reason"].split(" (")[0]) for reject in rejects] == [
        (10, "no 'text' field"),
        (11, "'text' is not a string"),
        (12, "'text' is empty"),
        (13, "not JSON: Expecting property name enclosed in double quotes"),
        (14, "not a JSON object"),
        (15, "longer than the model's 256 tokens"),
    ]
    assert summary["embedded"] == 30 and summary["rejected"] == 6
    metadata = pq.read_schema(tmp_path / "out" / "part-00000.parquet").metadata
    assert metadata[b"model"].decode() == embed_tag and metadata[b"backend"].decode() == card["backend"]


@pytest.mark.parametrize("vector_type, arrow_type", [("int8", pa.int8()), ("ubinary", pa.uint8())])
def test_compact_vectors_are_the_servers_encoding_format(embed_tag, embed_url, tmp_path, vector_type, arrow_type):
    texts = [f"{TEXTS[i % 5][:200]} ({i})" for i in range(24)]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts))
    card = requests.get(f"{embed_url}/v1/models", timeout=30).json()["data"][0]
    output = tmp_path / vector_type
    options = ["--backend", card["backend"], "--vector-type", vector_type]
    embed.main(["--model", embed_tag, "--input", str(corpus), *options, "--output", str(output)])
    _, written = vectors_of(output)
    body = {"input": texts, "encoding_format": vector_type}
    served = np.array([item["embedding"] for item in requests.post(f"{embed_url}/v1/embeddings", json=body, timeout=60).json()["data"]])
    schema = pq.read_schema(output / "part-00000.parquet")
    assert schema.field("vector").type == pa.list_(arrow_type, served.shape[1]) and schema.metadata[b"vector_type"] == vector_type.encode()
    if vector_type == "int8":  # the same float vectors to 1e-5 (cosine), so a value may sit one step apart at most
        assert np.abs(written.astype(int) - served).max() <= 1 and np.mean(written == served) > 0.99
    else:  # signs packed in bytes: a sign flips only for a value within float noise of 0
        flipped = np.unpackbits(written.astype(np.uint8), axis=1) != np.unpackbits(served.astype(np.uint8), axis=1)
        assert flipped.sum() <= 2, flipped.sum()


def test_a_compact_type_the_model_cannot_give_is_refused_before_anything_runs(embed_tag, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(SystemExit, match="int8 with --dimensions: the ranges are those of the whole vector"):
        options = ["--vector-type", "int8", "--dimensions", "128"]
        embed.main(["--model", embed_tag, "--input", str(corpus), *options, "--output", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()
    # a model stored without ranges: int8/uint8 refused with the reason; the signs need no ranges
    assert "int8: the model was imported without calibration ranges" in vector_type_problem("int8", None, None)
    assert vector_type_problem("binary", None, 128) is None


def test_a_stopped_run_resumes_after_its_last_whole_part(embed_tag, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": [f"{TEXTS[i % 3]} number {i}" for i in range(50)]}), corpus)
    args = ["--model", embed_tag, "--input", str(corpus), "--output", str(tmp_path / "out"), "--backend", "onnx-int8", "--window", "16"]
    write, calls = Output.write, []

    def crash_on_the_second(self, *part):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        write(self, *part)

    monkeypatch.setattr(Output, "write", crash_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        embed.main(args)
    first = (tmp_path / "out" / "part-00000.parquet").stat().st_mtime_ns
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["manifest.json", "part-00000.parquet", "rejects-00000.jsonl"]
    monkeypatch.undo()

    summary = embed.main(args)

    ids, vectors = vectors_of(tmp_path / "out")
    assert ids == list(range(50)) and vectors.shape == (50, 384)
    assert summary["resumed_after_rows"] == 16 and summary["embedded"] == 34
    assert (tmp_path / "out" / "part-00000.parquet").stat().st_mtime_ns == first
    with pytest.raises(SystemExit, match="another job's output .*window"):
        embed.main([*args[:-1], "32"])


@pytest.mark.parametrize(
    ("name", "refusal"), [("missing.jsonl", "no such file"), ("corpus.txt", "unknown input format; expected one of .csv, .json")]
)
def test_an_input_it_cannot_read_is_refused_with_its_reason(tmp_path, name, refusal):
    (tmp_path / "corpus.txt").write_text("a text\n")
    with pytest.raises(SystemExit, match=refusal):
        embed.main(["--model", "no-model:latest", "--input", str(tmp_path / name), "--output", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_a_dry_run_plans_and_writes_nothing(embed_tag, tmp_path):
    corpus = tmp_path / "corpus.csv"
    with corpus.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "text"])
        writer.writerows([i, f"{TEXTS[i % 3]}, line\nwith a break {i}"] for i in range(40))

    plan = embed.main(
        ["--model", embed_tag, "--input", str(corpus), "--output", str(tmp_path / "out"), "--backend", "onnx-int8", "--dry-run"]
    )

    assert plan["texts_per_s"] > 0 and plan["rows"].startswith("unknown") and not (tmp_path / "out").exists()
