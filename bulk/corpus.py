"""The corpus in and the vectors out: rows read as a stream, parts and rejects written atomically.

Input: JSON Lines, CSV or Parquet, read a window of rows at a time (memory stays flat whatever the
corpus size). Output, in one directory:

- ``part-00000.parquet``...: ``id``, ``vector`` (fixed size: float32, or the compact type asked for,
  ``bulk.embedder.VECTOR_TYPES``), ``tokens``; the model tag, backend, precision and vector type in
  the file's metadata;
- ``rejects-00000.jsonl``...: the rows of the same window that were not embedded, with the reason;
- ``manifest.json``: the job (input, fields, model) and every finished part with the input rows it
  covers. A part and its rejects are written under temporary names and renamed into place, then the
  manifest, also renamed: a run stopped at any moment leaves whole files only, and the next run
  with the same job starts after the last part the manifest lists.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Row:
    """One input row: its number in the input (from 0), its id, and its text, or why it has none usable."""

    number: int
    id: Any
    text: str | None
    problem: str | None = None


def input_format(path: Path) -> str:
    if path.suffix.lower() not in FORMATS:
        raise SystemExit(f"{path}: unknown input format; expected one of {', '.join(sorted(FORMATS))}")
    return FORMATS[path.suffix.lower()]


def records(path: Path, fields: list[str]) -> Iterator[dict | str]:
    """The input's rows as dicts, in order; a JSON line that does not parse to an object comes as the reason."""
    kind = input_format(path)
    if kind == "parquet":
        parquet = pq.ParquetFile(path)
        present = [name for name in fields if name in parquet.schema_arrow.names]
        for batch in parquet.iter_batches(batch_size=4096, columns=present):
            yield from batch.to_pylist()
    elif kind == "csv":
        with path.open(newline="", encoding="utf-8") as lines:
            yield from csv.DictReader(lines)
    else:
        with path.open(encoding="utf-8") as lines:
            yield from (parsed(line) for line in lines if line.strip())


def parsed(line: str) -> dict | str:
    """One JSON line as a dict, or the reason it is none."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        return f"not JSON: {error.msg}"
    return record if isinstance(record, dict) else "not a JSON object"


def rows(path: Path, text_field: str, id_field: str | None, skip: int = 0) -> Iterator[Row]:
    """The input's rows from number ``skip`` on, each ``checked``."""
    for number, record in enumerate(records(path, [text_field, *([id_field] if id_field else [])])):
        if number >= skip:
            yield checked(number, record, text_field, id_field)


def checked(number: int, record: dict | str, text_field: str, id_field: str | None) -> Row:
    """Input row ``number`` (a record, or why it is none): a text field that is missing, not a string or
    blank makes it a reject, never a crash. Without ``id_field`` a row's id is its number."""
    if isinstance(record, str):
        return Row(number, number, None, record)
    row_id = record.get(id_field) if id_field else number
    text = record.get(text_field)
    if id_field and row_id in (None, ""):
        return Row(number, None, None, f"no {id_field!r} field")
    if text is None:
        return Row(number, row_id, None, f"no {text_field!r} field")
    if not isinstance(text, str):
        return Row(number, row_id, None, f"{text_field!r} is not a string ({type(text).__name__})")
    if not text.strip():
        return Row(number, row_id, None, f"{text_field!r} is empty")
    return Row(number, row_id, text)


def count_rows(path: Path) -> int | None:
    """The number of input rows when it is cheap to know (Parquet's metadata, JSON Lines' lines); None for CSV,
    whose quoted fields may span lines."""
    kind = input_format(path)
    if kind == "parquet":
        return pq.ParquetFile(path).metadata.num_rows
    if kind == "jsonl":
        with path.open("rb") as lines:
            return sum(1 for line in lines if line.strip())
    return None


def job_spec(source: str, text_field: str, id_field: str | None, model: str, prompt: str, **options) -> dict:
    """What identifies a job in its manifest: a run resumes only the same job. ``options``: dimensions,
    truncate, window, vector_type; the vector type is named only when compact, so that outputs begun
    before it was an option still resume."""
    if options.get("vector_type") == "float32":
        del options["vector_type"]
    return {"input": source, "text_field": text_field, "id_field": id_field, "model": model, "prompt": prompt, **options}


@dataclass
class Output:
    """The output directory of one job; ``job`` must match the manifest's for a run to resume there."""

    directory: Path
    job: dict
    parts: list[dict] = field(default_factory=list)

    @classmethod
    def open(cls, directory: Path, job: dict) -> Output:
        directory.mkdir(parents=True, exist_ok=True)
        manifest = directory / MANIFEST
        if not manifest.is_file():
            return cls(directory, job)
        written = json.loads(manifest.read_text())
        if written["job"] != job:
            changed = sorted(key for key in {*job, *written["job"]} if job.get(key) != written["job"].get(key))
            raise SystemExit(f"{directory} holds another job's output (it differs in: {', '.join(changed)}); choose another --output")
        return cls(directory, job, written["parts"])

    @property
    def rows_done(self) -> int:
        """Input rows covered by finished parts: where a resumed run starts."""
        return self.parts[-1]["input_rows"][1] if self.parts else 0

    def write(
        self, ids: list, vectors: np.ndarray, tokens: list[int], rejects: list[Row], input_rows: tuple[int, int], metadata: dict
    ) -> None:
        """The next part and its rejects, then the manifest that lists them."""
        self.parts.append(write_part(self.directory, len(self.parts), ids, vectors, tokens, rejects, input_rows, metadata))
        self.save()

    def save(self, **summary: Any) -> None:
        body = json.dumps({"job": self.job, "parts": self.parts, **summary}, indent=1, default=str)
        atomically(self.directory / MANIFEST, lambda path: path.write_text(body))


def summary(resumed_after_rows: int, embedded: int, reasons: dict[str, int], seconds: float) -> dict:
    """A run's summary, as the manifest records it at the end: rows embedded and rejected (by reason), texts/s."""
    return {
        "resumed_after_rows": resumed_after_rows,
        "embedded": embedded,
        "rejected": sum(reasons.values()),
        "rejected_by_reason": dict(reasons),
        "seconds": round(seconds, 2),
        "texts_per_s": round(embedded / seconds, 1) if seconds else None,
    }


def write_part(
    directory: Path,
    number: int,
    ids: list,
    vectors: np.ndarray,
    tokens: list[int],
    rejects: list[Row],
    input_rows: tuple[int, int],
    metadata: dict,
) -> dict:
    """Part ``number`` and its rejects, each written atomically; the manifest's entry for them."""
    part, rejected = f"part-{number:05d}.parquet", f"rejects-{number:05d}.jsonl"
    dimensions = vectors.shape[1] if len(vectors) else 0
    table = pa.table(
        {
            "id": pa.array(ids),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dimensions),  # its type: the vectors'
            "tokens": pa.array(tokens, pa.int32()),
        }
    ).replace_schema_metadata({key: str(value) for key, value in metadata.items()})
    atomically(directory / part, lambda path: pq.write_table(table, path))
    lines = "".join(json.dumps({"row": row.number, "id": row.id, "reason": row.problem}, default=str) + "\n" for row in rejects)
    atomically(directory / rejected, lambda path: path.write_text(lines))
    return {"file": part, "rows": len(ids), "rejects": rejected, "rejected": len(rejects), "input_rows": list(input_rows)}


def atomically(path: Path, write) -> None:
    """``write(temporary path)``, then the file renamed into place: readers see all of it or none."""
    scratch = path.with_name(f".{path.name}.partial")
    write(scratch)
    os.replace(scratch, path)
