"""The corpus in and the vectors out: rows read as a stream, parts and rejects written atomically.

Input: JSON Lines, CSV or Parquet, read a window of rows at a time (memory stays flat whatever the
corpus size). A row that cannot be embedded (undecodable, not JSON, a field missing, of another type
or too long, an id a part cannot hold) is a reject with its reason, never a crash. Output, in one directory:

- ``part-00000.parquet``...: ``id``, ``vector`` (fixed size: float32, or the compact type asked for,
  ``bulk.embedder.VECTOR_TYPES``), ``tokens``; the model tag, backend, precision and vector type in
  the file's metadata;
- ``rejects-00000.jsonl``...: the rows of the same window that were not embedded, with the reason;
- ``manifest.json``: the job (the input and its fingerprint, the fields, the model, what computes it and the
  options) and every finished part with the input rows it covers. A part and its rejects are written under
  temporary names and renamed into place, then the manifest, also renamed: a run stopped at any moment leaves
  whole files only, and the next run of the same job starts after the last part the manifest lists; a run
  of another job is refused there.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}
MANIFEST = "manifest.json"
CSV_FIELD_LIMIT = 131_072  # Python's default; a job whose --max-chars is higher raises it to that
MAX_ID_CHARS = 1024
INT64 = range(-(2**63), 2**63)
ID_TYPES = {"int": pa.int64(), "str": pa.string()}  # a part's id column: one of these, the same for a whole job
FINGERPRINT_BYTES = 1 << 20  # the input's first and last MiB are hashed


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


def records(path: Path, fields: list[str], max_chars: int | None = None) -> Iterator[dict | str]:
    """The input's rows as dicts, in order; a row that cannot be read as one comes as the reason.

    Text files are decoded with ``surrogateescape``: an undecodable byte becomes a lone surrogate, which
    ``parsed`` (in a JSON line) or ``checked`` (in a CSV field) makes a reject, and the rest of the file goes on."""
    kind = input_format(path)
    if kind == "parquet":
        parquet = pq.ParquetFile(path)
        present = [name for name in fields if name in parquet.schema_arrow.names]
        for batch in parquet.iter_batches(batch_size=4096, columns=present):
            yield from batch.to_pylist()
    elif kind == "csv":
        yield from csv_records(path, max(CSV_FIELD_LIMIT, max_chars or 0))
    else:
        with path.open(encoding="utf-8", errors="surrogateescape") as lines:
            yield from (parsed(line) for line in lines if line.strip())


class QuotedLines:
    """A text file's lines for ``csv``, counting the quote characters since ``record_starts``: a record whose
    count is odd at the end of a line goes on in the next one (a quote inside a quoted field comes doubled)."""

    def __init__(self, lines: Iterable[str]) -> None:
        self.lines, self.quotes = iter(lines), 0

    def __iter__(self) -> QuotedLines:
        return self

    def __next__(self) -> str:
        line = next(self.lines)
        self.quotes += line.count('"')
        return line

    def record_starts(self) -> None:
        self.quotes = 0

    def skip_rest_of_record(self) -> None:
        """The lines left of a record the reader gave up on, so that the next read starts at the next record."""
        while self.quotes % 2 and next(self, None) is not None:
            pass


def csv_records(path: Path, field_limit: int) -> Iterator[dict | str]:
    """A CSV file's rows as dicts (its first row names the fields); a row with a field past ``field_limit``
    characters comes as the reason, and reading goes on at the next record."""
    csv.field_size_limit(field_limit)  # bounded: no field holds more than this in memory
    with path.open(newline="", encoding="utf-8", errors="surrogateescape") as file:
        lines = QuotedLines(file)
        reader = csv.DictReader(lines)
        while True:
            lines.record_starts()
            try:
                yield next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                lines.skip_rest_of_record()
                too_long = "field larger than field limit" in str(error)
                yield f"a CSV field is longer than {field_limit} characters" if too_long else f"not CSV: {error}"


def parsed(line: str) -> dict | str:
    """One JSON line as a dict, or the reason it is none."""
    if (at := undecodable(line)) is not None:
        return f"not UTF-8: byte 0x{ord(line[at]) - 0xDC00:02x} at character {at} of the line"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        return f"not JSON: {error.msg}"
    except ValueError as error:  # an integer of more digits than Python converts
        return f"not JSON: {str(error).split(';')[0]}"
    except RecursionError:
        return "not JSON: nested too deeply"
    return record if isinstance(record, dict) else "not a JSON object"


def undecodable(text: str) -> int | None:
    """Where ``text`` holds its first lone surrogate (an undecodable byte read with ``surrogateescape``, or a
    JSON ``"\\ud800"`` escape): UTF-8 cannot encode it and the tokenizer would refuse it. None if nowhere."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def surrogate(character: str) -> str:
    """A lone surrogate named; ``surrogateescape`` reads an undecodable byte as one of U+DC80..U+DCFF."""
    code = ord(character)
    return f"a lone surrogate U+{code:04X}" + (f" (an undecodable byte 0x{code - 0xDC00:02x})" if 0xDC80 <= code <= 0xDCFF else "")


def rows(
    path: Path, text_field: str, id_field: str | None, skip: int = 0, id_type: str | None = None, max_chars: int | None = None
) -> Iterator[Row]:
    """The input's rows from number ``skip`` on, each ``checked``."""
    for number, record in enumerate(records(path, [text_field, *([id_field] if id_field else [])], max_chars)):
        if number >= skip:
            yield checked(number, record, text_field, id_field, id_type, max_chars)


def checked(
    number: int, record: dict | str, text_field: str, id_field: str | None, id_type: str | None = None, max_chars: int | None = None
) -> Row:
    """Input row ``number`` (a record, or why it is none): an id a part cannot hold (``id_problem``), or a text
    that is missing, not a string, longer than ``max_chars``, blank or not valid UTF-8 makes it a reject, never a
    crash. Without ``id_field`` a row's id is its number."""
    if isinstance(record, str):
        return Row(number, None if id_field else number, None, record)
    row_id = record.get(id_field) if id_field else number
    if id_field and (problem := id_problem(row_id, id_field, id_type)):
        return Row(number, None, None, problem)
    text = record.get(text_field)
    if text is None:
        return Row(number, row_id, None, f"no {text_field!r} field")
    if not isinstance(text, str):
        return Row(number, row_id, None, f"{text_field!r} is not a string ({type(text).__name__})")
    if max_chars is not None and len(text) > max_chars:
        return Row(number, row_id, None, f"{text_field!r} is longer than {max_chars} characters (--max-chars)")
    if not text.strip():
        return Row(number, row_id, None, f"{text_field!r} is empty")
    if (at := undecodable(text)) is not None:
        return Row(number, row_id, None, f"{text_field!r} is not valid UTF-8: {surrogate(text[at])} at character {at}")
    return Row(number, row_id, text)


def id_kind(value: Any) -> str | None:
    """The ``ID_TYPES`` name of an id's type, "int" or "str"; None for any other type."""
    if isinstance(value, str):
        return "str"
    return "int" if isinstance(value, int) and not isinstance(value, bool) else None


def id_problem(value: Any, id_field: str, id_type: str | None) -> str | None:
    """Why ``value`` cannot be a row's id in a part whose ids are ``id_type`` (either, when None): missing, of
    another type, an integer past 64 bits, a string too long or not valid UTF-8. None when it can be."""
    kind = id_kind(value)
    if value is None or value == "":
        return f"no {id_field!r} field"
    if kind is None:
        return f"{id_field!r} is not a string or an integer ({type(value).__name__})"
    if kind == "int" and value not in INT64:
        return f"{id_field!r} is an integer past 64 bits ({value.bit_length()} bits)"
    if kind == "str" and len(value) > MAX_ID_CHARS:
        return f"{id_field!r} is longer than {MAX_ID_CHARS} characters"
    if kind == "str" and (at := undecodable(value)) is not None:
        return f"{id_field!r} is not valid UTF-8: {surrogate(value[at])} at character {at}"
    if id_type is not None and kind != id_type:
        named = {"int": ("an integer", "integers"), "str": ("a string", "strings")}
        return f"{id_field!r} is {named[kind][0]}; this job's ids are {named[id_type][1]}, as its first id is"
    return None


def first_id_type(records: Iterable[dict | str], id_field: str | None) -> str:
    """The job's id type (``ID_TYPES``): that of the input's first id a part can hold (strings if none can);
    row numbers are integers. A part holds one type, so a row whose id has the other is a reject."""
    if id_field is None:
        return "int"
    for record in records:
        if isinstance(record, dict) and id_problem(value := record.get(id_field), id_field, None) is None:
            return id_kind(value)
    return "str"


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


def fingerprint(path: Path) -> dict:
    """What tells this input file from a replaced one without reading it all: its size, modification time
    and a hash of its first and last MiB."""
    stat = path.stat()
    digest = hashlib.sha256()
    with path.open("rb") as file:
        digest.update(file.read(FINGERPRINT_BYTES))
        if stat.st_size > FINGERPRINT_BYTES:
            file.seek(max(FINGERPRINT_BYTES, stat.st_size - FINGERPRINT_BYTES))
            digest.update(file.read(FINGERPRINT_BYTES))
    return {"bytes": stat.st_size, "modified_ns": stat.st_mtime_ns, "sha256_first_last_mib": digest.hexdigest()}


def job_spec(source: str, text_field: str, id_field: str | None, model: str, prompt: str, **options) -> dict:
    """What identifies a job in its manifest: a run resumes only the same job. ``model``: its store tag with
    the version; ``options``: the input's fingerprint, the backend and precision actually served, the id type,
    and every option that changes a vector or a row's fate (dimensions, vector type, truncation, max chars, window)."""
    return {"input": source, "text_field": text_field, "id_field": id_field, "model": model, "prompt": prompt, **options}


def differences(before: dict, now: dict, prefix: str = "") -> list[str]:
    """Each field that differs, as "field: value in the manifest, value here"; nested fields as ``parent.field``."""
    found = []
    for key in dict.fromkeys([*now, *before]):
        old, new = before.get(key), now.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            found += differences(old, new, f"{prefix}{key}.")
        elif old != new:
            found.append(f"{prefix}{key}: {'none' if old is None else old} in the manifest, {'none' if new is None else new} here")
    return found


@dataclass
class Output:
    """The output directory of one job; ``job`` must match the manifest's for a run to resume there."""

    directory: Path
    job: dict
    parts: list[dict] = field(default_factory=list)

    @classmethod
    def open(cls, directory: Path, job: dict) -> Output:
        """The output to write to: new, or the same job's to resume; another job's is refused, naming each field that differs."""
        if directory.exists() and not directory.is_dir():
            raise SystemExit(f"{directory}: not a directory; --output names the job's directory")
        directory.mkdir(parents=True, exist_ok=True)
        manifest = directory / MANIFEST
        if not manifest.is_file():
            return cls(directory, job)
        try:
            written = json.loads(manifest.read_text())
            before, parts = written["job"], written["parts"]
        except (ValueError, KeyError, TypeError) as error:
            raise SystemExit(f"{manifest} cannot be read ({error!r}); choose another --output") from None
        job = json.loads(json.dumps(job))  # as the manifest would hold it
        if changed := differences(before, job):
            raise SystemExit(
                f"{directory} holds another job's output ({'; '.join(changed)}): resuming would mix the two in one output. "
                "Run with the same input, model, backend and options, or choose another --output"
            )
        return cls(directory, job, parts)

    @property
    def rows_done(self) -> int:
        """Input rows covered by finished parts: where a resumed run starts."""
        return self.parts[-1]["input_rows"][1] if self.parts else 0

    def write(
        self, ids: list, vectors: np.ndarray, tokens: list[int], rejects: list[Row], input_rows: tuple[int, int], metadata: dict
    ) -> None:
        """The next part and its rejects, then the manifest that lists them."""
        part = write_part(self.directory, len(self.parts), ids, vectors, tokens, rejects, input_rows, metadata, self.job.get("id_type"))
        self.parts.append(part)
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


def reason_kind(reason: str) -> str:
    """A reject's reason without its details (what follows the first colon): how the summary counts rejects."""
    return reason.split(":")[0]


def write_part(
    directory: Path,
    number: int,
    ids: list,
    vectors: np.ndarray,
    tokens: list[int],
    rejects: list[Row],
    input_rows: tuple[int, int],
    metadata: dict,
    id_type: str | None = None,
) -> dict:
    """Part ``number`` and its rejects, each written atomically; the manifest's entry for them. ``id_type``
    (``ID_TYPES``): the id column's type, the same in every part, even one whose rows were all rejected."""
    part, rejected = f"part-{number:05d}.parquet", f"rejects-{number:05d}.jsonl"
    table = pa.table(
        {
            "id": pa.array(ids, ID_TYPES.get(id_type)),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1]),  # its type: the vectors'
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
