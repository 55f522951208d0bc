"""``python -m bulk.embed``: a corpus to Parquet vectors equal to the server's, bad rows kept aside, resumable."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from bulk import embed
from bulk import embedder as embedder_module
from bulk.corpus import Output
from bulk.embedder import vector_type_problem
from tests.reference import TEXTS


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


def rejected(directory) -> list[tuple[int, object, str]]:
    """Every reject's (row, id, reason), in order."""
    lines = [line for path in sorted(directory.glob("rejects-*.jsonl")) for line in path.read_text().splitlines()]
    return [(reject["row"], reject["id"], reject["reason"]) for reject in map(json.loads, lines)]


def test_rows_it_cannot_read_or_hold_are_rejects_with_their_reason_never_a_crash(embed_tag, tmp_path):
    good = [{"id": f"doc-{i}", "text": f"{TEXTS[i % 5][:200]} ({i})"} for i in range(12)]
    broken = [
        (b'{"id": "bad-byte", "text": "caf\xff au lait"}', "not UTF-8: byte 0xff at character 31 of the line"),
        (
            json.dumps({"id": "surrogate", "text": "abc \ud800 def"}).encode(),
            "'text' is not valid UTF-8: a lone surrogate U+D800 at character 4",
        ),
        (b'{"id": ' + b"9" * 5000 + b', "text": "x"}', "not JSON: Exceeds the limit (4300 digits)"),
        (b'{"id": ' + b"9" * 3000 + b', "text": "x"}', "'id' is an integer past 64 bits"),
        (json.dumps({"id": "x" * 5000, "text": "x"}).encode(), "'id' is longer than 1024 characters"),
        (json.dumps({"id": 7, "text": "an integer id"}).encode(), "'id' is an integer; this job's ids are strings"),
        (json.dumps({"id": 1.5, "text": "a float id"}).encode(), "'id' is not a string or an integer (float)"),
        (json.dumps({"id": "null-text", "text": None}).encode(), "no 'text' field"),
        (json.dumps({"id": "long", "text": "word " * 300}).encode(), "'text' is longer than 1000 characters"),
        (b"[" * 100_000, "not JSON: nested too deeply"),
    ]
    lines = [json.dumps(row).encode() for row in good[:6]] + [line for line, _ in broken] + [json.dumps(row).encode() for row in good[6:]]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b"\n".join(lines) + b"\n")
    options = ["--id-field", "id", "--backend", "onnx-int8", "--window", "8", "--max-chars", "1000"]

    summary = embed.main(["--model", embed_tag, "--input", str(corpus), *options, "--output", str(tmp_path / "out")])

    ids, vectors = vectors_of(tmp_path / "out")
    assert ids == [row["id"] for row in good] and np.isfinite(vectors).all()
    rejects = rejected(tmp_path / "out")
    assert [row for row, _, _ in rejects] == list(range(6, 6 + len(broken)))
    for (_, _, reason), (_, expected) in zip(rejects, broken, strict=True):
        assert reason.startswith(expected), (reason, expected)
    assert summary["embedded"] == 12 and summary["rejected"] == len(broken)
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["job"]["id_type"] == "str"


def test_a_csv_field_past_the_csv_limit_is_a_reject_and_the_rows_after_it_are_read(embed_tag, tmp_path):
    huge = "y" * 100_000 + "\n" + "y" * 100_000 + "\n" + "the end, quoted across three lines"  # 200,035 characters
    corpus = tmp_path / "corpus.csv"
    with corpus.open("w", newline="") as out:
        csv.writer(out).writerows([["id", "text"], ["a", "the first"], ["b", huge], ["c", "the third"], ["d", "z" * 25_000], ["e", "last"]])

    summary = embed.main(
        ["--model", embed_tag, "--input", str(corpus), "--id-field", "id", "--backend", "onnx-int8", "--output", str(tmp_path / "out")]
    )

    ids, _ = vectors_of(tmp_path / "out")
    assert ids == ["a", "c", "e"] and summary["embedded"] == 3
    assert rejected(tmp_path / "out") == [
        (1, None, "a CSV field is longer than 131072 characters"),
        (3, "d", "'text' is longer than 20000 characters (--max-chars)"),
    ]


def test_vectors_that_are_not_finite_are_rejects_never_written(embed_tag, tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"{TEXTS[i % 3]} number {i}"}) + "\n" for i in range(6)))
    run_window = embedder_module.run_window

    def poisoned(*args):
        rows = [row.copy() for row in run_window(*args)]
        rows[1][:] = np.nan
        rows[4][0] = np.inf
        return rows

    monkeypatch.setattr(embedder_module, "run_window", poisoned)
    summary = embed.main(["--model", embed_tag, "--input", str(corpus), "--backend", "onnx-int8", "--output", str(tmp_path / "out")])

    ids, vectors = vectors_of(tmp_path / "out")
    assert ids == [0, 2, 3, 5] and np.isfinite(vectors).all() and summary["rejected"] == 2
    assert rejected(tmp_path / "out") == [(row, row, "the model's vector is not finite (NaN or infinity)") for row in (1, 4)]


def first_part_only(directory) -> None:
    """The output as a job killed after its first part leaves it."""
    manifest = json.loads((directory / "manifest.json").read_text())
    (directory / "manifest.json").write_text(json.dumps({"job": manifest["job"], "parts": manifest["parts"][:1]}))
    for part in manifest["parts"][1:]:
        (directory / part["file"]).unlink()
        (directory / part["rejects"]).unlink()


def test_a_resume_with_another_backend_or_a_replaced_input_is_refused_naming_what_differs(embed_tag, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"{TEXTS[i % 3]} number {i}"}) + "\n" for i in range(20)))
    common = ["--model", embed_tag, "--input", str(corpus), "--output", str(tmp_path / "out"), "--window", "8"]
    embed.main([*common, "--backend", "onnx-int8"])
    first_part_only(tmp_path / "out")
    stopped = {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()}

    with pytest.raises(
        SystemExit, match=r"backend: onnx-int8 in the manifest, onnx here; precision: int8 \(u8×[su]8\) in the manifest, fp32 here"
    ):
        embed.main([*common, "--backend", "onnx"])
    # the same size and modification time, another text: the hash of its first and last MiB tells
    modified = corpus.stat().st_mtime_ns
    corpus.write_text(corpus.read_text().replace('number 1"', 'number X"'))
    os.utime(corpus, ns=(modified, modified))
    with pytest.raises(SystemExit, match=r"input_fingerprint\.sha256_first_last_mib: [0-9a-f]{64} in the manifest, [0-9a-f]{64} here"):
        embed.main([*common, "--backend", "onnx-int8"])

    assert {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()} == stopped  # nothing appended


@pytest.mark.parametrize(
    "option, value, refusal",
    [
        ("--dimensions", "-1", "must be 1 or more"),
        ("--dimensions", "0", "must be 1 or more"),
        ("--window", "0", "must be 1 or more"),
        ("--window", "ten", "not a whole number"),
        ("--max-chars", "-5", "must be 1 or more"),
        ("--text-field", "", "must not be empty"),
    ],
)
def test_bad_arguments_are_refused_before_anything_loads(tmp_path, capsys, option, value, refusal):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(SystemExit) as stopped:
        embed.main(["--model", "no-model:latest", "--input", str(corpus), "--output", str(tmp_path / "out"), option, value])
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and f"argument {option}: " in error and refusal in error, error
    assert not (tmp_path / "out").exists()
