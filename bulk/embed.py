"""A corpus to vectors on one machine: the stored model, its tokenizer and the server's backends, in process.

    python -m bulk.embed --model text-model:latest --input corpus.jsonl --text-field text --id-field id --output vectors/

Same vectors as ``/v1/embeddings`` answers for the same text: the same tokenizer and prompt, the
same backend chosen the same way (``auto``'s self-check and speed trial on this machine), the same
length-sorted forward passes under the token budget (``models.inference.run_batch``) and the same
Matryoshka cut. What the server adds per request (HTTP, the hop, batching across clients) is not
paid here. The input is read a window at a time; while one window runs through the model the next
one is tokenized (the Rust tokenizer uses every core). Stopped at any moment (Ctrl-C, a crash, a
kill), the same command resumes after the last finished part (``bulk/corpus.py``); a run whose job
differs (the input replaced, another model version, backend or precision, another option) is refused there.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bentoml
from tqdm import tqdm

from api.errors import APIError
from api.options import check_dimensions, prompt_for
from models.backends import BACKENDS
from models.calibration import load_ranges
from models.spec import ModelSpec
from models.tasks import task_of
from models.tokenization import Encoded
from serving.settings import settings

from .corpus import Output, Row, count_rows, fingerprint, first_id_type, input_format, job_spec, reason_kind, records, rows, summary
from .embedder import VECTOR_TYPES, Embedder, vector_type_problem

logger = logging.getLogger("textbento.bulk")
DRY_RUN_TEXTS = 256  # timed to estimate the whole job


def checked_prompt(tag: object, spec: ModelSpec, prompt_name: str | None, dimensions: int | None) -> str:
    """The prompt put before every text, once the model and the options are known good; else SystemExit naming why."""
    if not task_of(spec).dense_vector_per_text:
        raise SystemExit(f"{tag} is not a dense embedder (task {spec.task!r}); bulk jobs write dense vectors")
    try:
        prompt = prompt_for(spec, prompt_name, None)
        check_dimensions(spec, dimensions)
    except APIError as error:
        raise SystemExit(error.message) from None
    return prompt


def stored(tag: str) -> bentoml.Model:
    """The model ``tag`` names in the BentoML store; else SystemExit naming why."""
    try:
        return bentoml.models.get(tag)
    except (bentoml.exceptions.BentoMLException, ValueError) as error:
        raise SystemExit(f"--model {tag}: {error}") from None


class Job(Embedder):
    """The stored embedder named by its store tag, its options checked, ready on this machine's cores."""

    def __init__(
        self, tag: str, backend: str, prompt_name: str | None, dimensions: int | None, truncate: bool, vector_type: str = "float32"
    ) -> None:
        self.model = stored(tag)
        prompt = checked_prompt(self.model.tag, ModelSpec.of(self.model), prompt_name, dimensions)
        if problem := vector_type_problem(vector_type, load_ranges(self.model.path), dimensions):
            raise SystemExit(problem)
        threads, budget = settings.runner_threads, settings.token_budget
        super().__init__(self.model.path, backend, prompt, dimensions, truncate, threads, budget, vector_type)

    def prepared(self, windows: Iterator[list[Row]]) -> tuple[list[Row], list[Row], list[Encoded], list[Row]] | None:
        """The next window, its rows to embed, their tokens and its refused rows; None at the end of the input."""
        window = next(windows, None)
        return (window, *self.tokenized(window)) if window else None


def windows(stream: Iterator[Row], size: int) -> Iterator[list[Row]]:
    while window := list(itertools.islice(stream, size)):
        yield window


def run(job: Job, output: Output, input_path: Path, text_field: str, id_field: str | None, window: int) -> dict:
    """Every window of the input after the finished parts, embedded and written; the summary."""
    started, skip = time.perf_counter(), output.rows_done
    total = count_rows(input_path)
    reasons: Counter[str] = Counter()
    embedded = 0
    progress = tqdm(total=total, initial=skip, unit="text", dynamic_ncols=True, disable=None, smoothing=0.1)
    id_type, max_chars = output.job["id_type"], output.job["max_chars"]
    with ThreadPoolExecutor(1, thread_name_prefix="tokenize") as tokenizer:
        chunks = windows(rows(input_path, text_field, id_field, skip, id_type, max_chars), window)
        ahead = tokenizer.submit(job.prepared, chunks)
        while (prepared := ahead.result()) is not None:
            current, texts, encoded, refused = prepared
            ahead = tokenizer.submit(job.prepared, chunks)  # the next window tokenizes while this one computes
            texts, encoded, vectors, not_finite = job.embedded(texts, encoded)
            refused = sorted(refused + not_finite, key=lambda row: row.number)
            span = (current[0].number, current[-1].number + 1)
            output.write([row.id for row in texts], vectors, [e.tokens for e in encoded], refused, span, job.metadata)
            reasons.update(reason_kind(row.problem) for row in refused)
            embedded += len(texts)
            progress.update(len(current))
    progress.close()
    done = summary(skip, embedded, reasons, time.perf_counter() - started)
    output.save(done=True, summary=done)
    return done


def dry_run(job: Job, input_path: Path, text_field: str, id_field: str | None, max_chars: int) -> dict:
    """The plan: rows, an estimate of the time from the first texts embedded here, and the output's size."""
    total = count_rows(input_path)
    sample = list(itertools.islice(rows(input_path, text_field, id_field, max_chars=max_chars), DRY_RUN_TEXTS))
    _, encoded, _ = job.tokenized(sample)
    rate = job.rate(encoded)
    return {
        "rows": total if total is not None else "unknown (CSV: not counted ahead)",
        "model": str(job.model.tag),
        "backend": f"{job.backend.name} {job.backend.precision}",
        "texts_per_s": round(rate, 1) if rate else None,
        "estimated_s": round(total / rate) if rate and total else None,
        "vector_type": job.vector_type,
        "vector_bytes": total * job.vector_bytes if total else None,
    }


def positive(value: str) -> int:
    """An argument that counts something: a whole number, 1 or more."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number}: must be 1 or more")
    return number


def field_name(value: str) -> str:
    """An argument that names a field of the input."""
    if not value.strip():
        raise argparse.ArgumentTypeError("a field's name must not be empty")
    return value


def job_of(
    args: argparse.Namespace, source: str, input_fingerprint: dict, model: str, prompt: str, computes: tuple[str, str], id_type: str
) -> dict:
    """The job's identity, as its manifest records it (``bulk.corpus.job_spec``): the input (``source``, its
    fingerprint), the model's tag with its version, the prompt, what computes it (the backend and precision
    ``--backend`` chose), the id type and every option that changes a vector or a row's fate."""
    backend, precision = computes
    return job_spec(
        source,
        args.text_field,
        args.id_field,
        model,
        prompt,
        input_fingerprint=input_fingerprint,
        backend=backend,
        precision=precision,
        id_type=id_type,
        dimensions=args.dimensions,
        vector_type=args.vector_type,
        truncate=not args.no_truncate,
        max_chars=args.max_chars,
        window=args.window,
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bulk.embed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="text-model:latest", help="BentoML store tag of an embedder")
    parser.add_argument("--input", required=True, type=Path, help=".jsonl, .csv or .parquet")
    parser.add_argument("--text-field", default="text", type=field_name)
    parser.add_argument("--id-field", type=field_name, help="default: the row's number in the input")
    parser.add_argument("--output", required=True, type=Path, help="directory: Parquet parts, rejects, manifest.json")
    parser.add_argument("--backend", default=settings.backend, choices=BACKENDS)
    parser.add_argument("--prompt-name", help="one of the model's prompts; default: its default prompt, if any")
    parser.add_argument("--dimensions", type=positive, help="Matryoshka: the first N dimensions, renormalized")
    parser.add_argument(
        "--vector-type", default="float32", choices=VECTOR_TYPES, help="the vector column's type, as the server's encoding_format"
    )
    parser.add_argument("--no-truncate", action="store_true", help="reject texts past the model's limit instead of cutting them")
    parser.add_argument(
        "--max-chars", type=positive, default=settings.max_chars, help="reject longer texts (default: TEXTBENTO_MAX_CHARS, as the server)"
    )
    parser.add_argument("--window", type=positive, default=8192, help="rows read, tokenized and written (one part) at a time")
    parser.add_argument("--dry-run", action="store_true", help="show the plan and a measured estimate; write nothing")
    args = parser.parse_args(argv)
    if not args.input.is_file():
        raise SystemExit(f"{args.input}: no such file")
    input_format(args.input)  # an unknown one is refused before the model loads
    if args.output.exists() and not args.output.is_dir():
        raise SystemExit(f"{args.output}: not a directory; --output names the job's directory")
    job = Job(args.model, args.backend, args.prompt_name, args.dimensions, not args.no_truncate, args.vector_type)
    if args.dry_run:
        plan = dry_run(job, args.input, args.text_field, args.id_field, args.max_chars)
        print(json.dumps(plan, indent=1))
        return plan
    id_type = first_id_type(records(args.input, [args.text_field, args.id_field], args.max_chars), args.id_field)
    computes = (job.backend.name, job.backend.precision)
    identity = job_of(args, str(args.input.resolve()), fingerprint(args.input), str(job.model.tag), job.prompt, computes, id_type)
    output = Output.open(args.output, identity)
    result = run(job, output, args.input, args.text_field, args.id_field, args.window)
    print(json.dumps(result, indent=1), file=sys.stderr)
    return result


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
