"""A corpus to vectors on Apache Spark: ``bulk.embed``'s rows, model and files, its windows spread over executors.

    python -m bulk.spark --master 'local[2]' --model text-model:latest --input corpus.jsonl --id-field id --output vectors/

The input is read and numbered as ``bulk.embed`` reads it (the same row numbers, the same rejects
and reasons); every window of ``--window`` rows becomes one Spark partition, which an executor's
Python worker embeds with ``bulk.embedder`` and writes as that window's part and rejects, atomically,
into the output directory (shared by the executors). The driver then writes the manifest: the same
files as ``bulk.embed`` writes, part for part. A directory whose manifest lists finished parts of
the same job is resumed after them, whichever of the two wrote them. The job names the backend and
precision one executor chose before any window runs (``served``); an executor that would compute
otherwise (``auto`` or the int8 kernels choosing differently on another CPU class) fails its task
rather than write a part of another computation.

``embed_texts`` is the same model on any DataFrame with a text column: three columns more, through
``mapInArrow``. On both paths each Python worker loads the model once (``Model.embedder``, a cache
by model directory, backend and threads) and keeps it for every batch and task it runs after; its
backend gets ``spark.task.cpus`` threads (docs/bulk.md, "On Spark").
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import resource
import shutil
import sys
import tarfile
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa

from models.backends import BACKENDS
from models.calibration import load_ranges
from models.onnx_layout import has_onnx

from .corpus import Output, Row, checked, fingerprint, id_kind, id_problem, input_format, parsed, reason_kind, summary, write_part
from .corpus import records as corpus_records
from .embedder import VECTOR_TYPES, Embedder, stored_model, vector_type_problem

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Model:
    """The embedder as every Python worker builds it: where the model is and what to run it with.

    ``directory``: a path every executor reads (local mode, a shared filesystem), or with
    ``shipped`` the name of the archive the driver added to the job (``SparkContext.addArchive``),
    unpacked on each executor where ``SparkFiles.get`` finds it. ``threads``: the backend's CPU
    threads, by default ``spark.task.cpus`` (the cores Spark gives each task). ``token_budget``: the
    driver's ``TEXTBENTO_TOKEN_BUDGET``, so that every executor cuts its passes as ``bulk.embed`` there would.
    ``vector_type``: one of ``bulk.embedder.VECTOR_TYPES``, checked on the driver. ``computes``: the backend
    and precision the job's parts are written with (``served``); None where any will do.
    """

    directory: str
    shipped: bool
    backend: str
    prompt: str
    dimensions: int | None
    truncate: bool
    token_budget: int
    threads: int | None = None
    vector_type: str = "float32"
    computes: tuple[str, str] | None = None

    def embedder(self) -> Embedder:
        """This process's embedder: the model loaded by the first call for its directory, backend and threads, kept after."""
        key = (self.directory, self.shipped, self.backend, self.threads)
        if key not in _LOADED:
            from pyspark import SparkFiles, TaskContext

            directory = SparkFiles.get(self.directory) if self.shipped else self.directory
            context = TaskContext.get()
            threads = self.threads or (context.cpus() if context else 1)
            _LOADED[key] = Embedder(directory, self.backend, self.prompt, self.dimensions, self.truncate, threads, self.token_budget)
            LOADS[os.getpid()] += 1
        return _LOADED[key].with_options(self.prompt, self.dimensions, self.truncate, self.token_budget, self.vector_type)


_LOADED: dict[tuple, Embedder] = {}
LOADS: Counter[int] = Counter()  # model loads by process id: one per Python worker that embedded anything


def model_directory(model: str) -> Path:
    """A stored model's directory: ``model`` itself when it holds one (``model.yaml``; a relative path stays
    relative, as each executor's working directory holds what ``spark-submit --archives`` unpacked), else the
    store's for that tag."""
    if (Path(model) / "model.yaml").is_file():
        return Path(model)
    from .embed import stored

    return Path(stored(model).path)


def prepared(
    spark,
    model: str,
    backend: str = "auto",
    prompt_name: str | None = None,
    dimensions: int | None = None,
    truncate: bool = True,
    threads: int | None = None,
    ship: bool | None = None,
    vector_type: str = "float32",
) -> Model:
    """The model checked on the driver, and shipped with the job unless the executors read its directory.

    ``model``: a store tag or a stored model's directory. ``ship``: None ships it except in local mode.
    """
    from serving.settings import settings  # the driver's: it imports BentoML, which an executor needs not

    from .embed import checked_prompt

    directory = model_directory(model)
    tag, spec = stored_model(directory)
    prompt = checked_prompt(tag, spec, prompt_name, dimensions)
    if problem := vector_type_problem(vector_type, load_ranges(directory), dimensions):
        raise SystemExit(problem)
    if ship is None:
        ship = not spark.sparkContext.master.startswith("local")
    place = shipped(spark, directory, tag, backend) if ship else str(directory)
    return Model(place, ship, backend, prompt, dimensions, truncate, settings.token_budget, threads, vector_type)


def shipped(spark, directory: Path, tag: str, backend: str) -> str:
    """``directory`` as a tar archive added to the job: each executor downloads and unpacks it once. The
    PyTorch weights stay behind when an ONNX backend will run (``auto`` runs one where the graphs are).
    Once per session; the archive is removed when this process ends."""
    onnx = backend != "torch" and has_onnx(directory)
    key = (spark.sparkContext.applicationId, str(directory), onnx)
    if key not in _SHIPPED:
        scratch = tempfile.mkdtemp(prefix="textbento-model-")
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        archive = Path(scratch) / (tag.replace(":", "-") + ("-onnx" if onnx else "") + ".tar")
        with tarfile.open(archive, "w") as tar:
            for path in sorted(directory.iterdir()):
                if not (onnx and (path.suffix == ".safetensors" or path.name.startswith("pytorch_model"))):
                    tar.add(path, arcname=path.name)
        spark.sparkContext.addArchive(str(archive))
        _SHIPPED[key] = archive.name
    return _SHIPPED[key]


_SHIPPED: dict[tuple, str] = {}


def embed_texts(df, model: str, *, text_column: str = "text", **options):
    """``df`` with three columns more: ``vector`` (array<float>), ``tokens`` (int) and ``reason`` (string).

    A row whose text was embedded has its vector and token count and no reason; one whose text is
    null, blank, or (``truncate=False``) past the model's limit has no vector and the reason. The
    other columns pass through. ``options``: those of ``prepared`` (backend, prompt_name, dimensions,
    truncate, threads, ship; float32 vectors only: Spark has no unsigned bytes). Every Arrow batch
    (``spark.sql.execution.arrow.maxRecordsPerBatch`` rows) runs as ``bulk.embed`` runs a window.
    """
    from pyspark.sql.types import ArrayType, FloatType, IntegerType, StringType, StructField, StructType

    if options.get("vector_type", "float32") != "float32":
        raise ValueError("embed_texts writes float32 vectors; for compact ones, python -m bulk.spark --vector-type writes them as Parquet")

    if not isinstance(df.schema[text_column].dataType, StringType):
        raise TypeError(f"{text_column!r} is {df.schema[text_column].dataType.simpleString()}, not a string column")
    prepared_model = prepared(df.sparkSession, model, **options)
    added = [
        StructField("vector", ArrayType(FloatType(), containsNull=False)),
        StructField("tokens", IntegerType()),
        StructField("reason", StringType()),
    ]
    return df.mapInArrow(lambda batches: embedded_batches(batches, prepared_model, text_column), StructType([*df.schema.fields, *added]))


def embedded_batches(batches: Iterable[pa.RecordBatch], model: Model, text_column: str) -> Iterator[pa.RecordBatch]:
    """Each batch with its vectors, token counts and reasons (``embed_texts``, in a Python worker)."""
    job = model.embedder()
    for batch in batches:
        window = [
            checked(index, {text_column: text}, text_column, None) for index, text in enumerate(batch.column(text_column).to_pylist())
        ]
        texts, encoded, refused = job.tokenized(window)
        texts, encoded, vectors, not_finite = job.embedded(texts, encoded)
        refused += not_finite
        lengths = [0] * batch.num_rows
        tokens: list[int | None] = [None] * batch.num_rows
        reasons: list[str | None] = [None] * batch.num_rows
        for row, e in zip(texts, encoded, strict=True):
            lengths[row.number], tokens[row.number] = vectors.shape[1], e.tokens
        for row in refused:
            reasons[row.number] = row.problem
        offsets = pa.array([0, *itertools.accumulate(lengths)], pa.int32())
        values = pa.array(vectors.reshape(-1), pa.float32())  # ``texts`` are in the batch's order
        vector = pa.ListArray.from_arrays(offsets, values, mask=pa.array([reason is not None for reason in reasons]))
        columns = [*batch.columns, vector, pa.array(tokens, pa.int32()), pa.array(reasons, pa.string())]
        yield pa.RecordBatch.from_arrays(columns, [*batch.schema.names, "vector", "tokens", "reason"])


def read(spark, source: str, fields: list[str], max_chars: int | None = None):
    """The input's records as ``bulk.corpus.records`` reads them (an RDD of dicts and reasons, in order) and
    the RDD whose splits are counted to number them.

    JSON Lines are read as lines of bytes (Spark's text reader keeps them as they are; ``textFile`` would
    read an undecodable byte as U+FFFD) and decoded and parsed here, as ``bulk.corpus`` decodes and parses
    them. ``source``: a path, or for JSON Lines and Parquet any URI Spark reads (hdfs://, s3a://...).
    """
    kind = input_format(Path(source))
    if kind == "jsonl":
        lines = spark.read.text(source).selectExpr("CAST(value AS BINARY)").rdd
        counted = lines.map(lambda line: bytes(line[0]).decode("utf-8", "surrogateescape")).filter(str.strip)
        return counted, counted.map(parsed)
    if kind == "csv":  # one task reads it with bulk.corpus: Spark's reader cannot tell an empty field from a missing one
        records = spark.sparkContext.parallelize([source], 1).flatMap(lambda path: corpus_records(Path(path), fields, max_chars))
        return records, records
    frame = spark.read.parquet(source)
    frame = frame.select(*[f"`{name}`" for name in fields if name in frame.columns])
    records = frame.rdd.map(lambda record: record.asDict())
    return records, records


def first_id_type(records, id_field: str | None) -> str:
    """``bulk.corpus.first_id_type`` on Spark's records: Spark reads the splits in order until it finds one."""
    if id_field is None:
        return "int"
    kinds = records.filter(lambda record: isinstance(record, dict) and id_problem(record.get(id_field), id_field, None) is None)
    found = kinds.map(lambda record: id_kind(record[id_field])).take(1)
    return found[0] if found else "str"


def numbered(spark, source: str, text_field: str, id_field: str | None, id_type: str | None = None, max_chars: int | None = None):
    """The input's rows as ``bulk.corpus.rows`` reads them, numbered across Spark's partitions of it:
    an RDD of (number, (number, id as JSON, text, reason)), and the number of rows.

    Spark reads the file in splits, in order; each split's rows are counted first, so that every split
    knows the number its first row has.
    """
    counted, records = read(spark, source, [text_field, *([id_field] if id_field else [])], max_chars)
    counts = counted.mapPartitions(lambda split: [sum(1 for _ in split)]).collect()
    starts = [sum(counts[:split]) for split in range(len(counts))]

    def rows(split: int, records: Iterator[dict | str]) -> Iterator[tuple[int, tuple]]:
        for number, record in enumerate(records, starts[split]):
            row = checked(number, record, text_field, id_field, id_type, max_chars)
            yield number, (number, json.dumps(row.id, default=str), row.text, row.problem)

    return records.mapPartitionsWithIndex(rows), sum(counts)


def as_rows(keyed: Iterable[tuple[int, tuple]]) -> list[Row]:
    """``numbered``'s pairs as ``bulk.corpus`` rows."""
    return [Row(number, json.loads(row_id), text, reason) for _, (number, row_id, text, reason) in keyed]


def written(window_rows: Iterable[tuple[int, tuple]], model: Model, directory: str, window: int, id_type: str) -> Iterator[dict]:
    """One window (a partition) embedded and written as its part and rejects: the manifest's entry for them."""
    window_rows = as_rows(window_rows)
    if not window_rows:
        return
    job = model.embedder()
    here = (job.backend.name, job.backend.precision)
    if model.computes and here != model.computes:
        raise RuntimeError(
            f"this executor computes with {' '.join(here)}, the job with {' '.join(model.computes)}: its part would mix two "
            "computations in one output. Run on executors of one CPU class, or name a backend that computes the same on each"
        )
    texts, encoded, refused = job.tokenized(window_rows)
    texts, encoded, vectors, not_finite = job.embedded(texts, encoded)
    refused = sorted(refused + not_finite, key=lambda row: row.number)
    first, last = window_rows[0].number, window_rows[-1].number
    entry = write_part(
        Path(directory),
        first // window,
        [row.id for row in texts],
        vectors,
        [e.tokens for e in encoded],
        refused,
        (first, last + 1),
        job.metadata,
        id_type,
    )
    reasons = Counter(reason_kind(row.problem) for row in refused)
    pid, rss = os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    yield {"entry": entry, "reasons": dict(reasons), "pid": pid, "loads": LOADS[pid], "backend": job.metadata, "rss": rss}


def served(spark, model: Model) -> Model:
    """``model`` bound to what one executor computes with (the backend and precision ``--backend`` chose
    there), which every window's task then checks for (``written``)."""
    (ran,) = spark.sparkContext.parallelize([0], 1).mapPartitions(lambda _: [model.embedder().metadata]).collect()
    return replace(model, computes=(ran["backend"], ran["precision"]))


def input_fingerprint(spark, source: str) -> dict:
    """``bulk.corpus.fingerprint`` of a path; of a URI, its size and modification time as Hadoop's file system tells them."""
    if "://" not in source:
        return fingerprint(Path(source))
    path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(source)
    status = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).getFileStatus(path)
    return {"bytes": status.getLen(), "modified_ms": status.getModificationTime()}


def dry_run(spark, model: Model, source: str, text_field: str, id_field: str | None) -> dict:
    """The plan, nothing written: the rows, the texts/s of one task on the first ``DRY_RUN_TEXTS`` (on an
    executor, with its threads), the time with every task slot of the cluster busy, and the vectors' size."""
    from .embed import DRY_RUN_TEXTS

    keyed, total = numbered(spark, source, text_field, id_field)
    sample = keyed.filter(lambda pair: pair[0] < DRY_RUN_TEXTS).coalesce(1)
    (measured,) = sample.mapPartitions(lambda rows: [timed(as_rows(rows), model)]).collect()
    slots = max(1, spark.sparkContext.defaultParallelism // int(spark.conf.get("spark.task.cpus", "1")))
    rate = measured["texts_per_s"]
    return {
        "rows": total,
        "model": measured["model"],
        "backend": measured["backend"],
        "texts_per_s_per_task": round(rate, 1) if rate else None,
        "task_slots": slots,
        "estimated_s": round(total / (rate * slots)) if rate and total else None,
        "vector_bytes": total * measured["vector_bytes"],
    }


def timed(rows: list[Row], model: Model) -> dict:
    """One task's texts/s on ``rows`` (``Embedder.rate``), with what ran them."""
    job = model.embedder()
    _, encoded, _ = job.tokenized(rows)
    ran = job.metadata
    backend = f"{ran['backend']} {ran['precision']}"
    return {"texts_per_s": job.rate(encoded), "model": ran["model"], "backend": backend, "vector_bytes": job.vector_bytes}


def run(spark, model: Model, output: Output, source: str, text_field: str, id_field: str | None, window: int, **noted: float) -> dict:
    """Every window after the finished parts, embedded and written by the executors; the manifest; the summary."""
    started, skip = time.perf_counter(), output.rows_done
    id_type, max_chars = output.job["id_type"], output.job["max_chars"]
    keyed, total = numbered(spark, source, text_field, id_field, id_type, max_chars)
    first_window, windows = skip // window, -(-total // window) - skip // window
    reports = []
    if windows > 0:
        by_window = keyed.filter(lambda pair: pair[0] >= skip).repartitionAndSortWithinPartitions(
            windows, lambda number: number // window - first_window
        )
        directory = str(output.directory.resolve())
        reports = by_window.mapPartitions(lambda rows: written(rows, model, directory, window, id_type)).collect()
    reports.sort(key=lambda report: report["entry"]["input_rows"][0])
    output.parts += [report["entry"] for report in reports]
    reasons: Counter[str] = Counter()
    for report in reports:
        reasons.update(report["reasons"])
    embedded = sum(report["entry"]["rows"] for report in reports)
    loads = {report["pid"]: report["loads"] for report in reports}
    done = {
        **summary(skip, embedded, reasons, time.perf_counter() - started),
        "spark": {
            "master": spark.sparkContext.master,
            "default_parallelism": spark.sparkContext.defaultParallelism,
            "partitions": windows,
            "python_workers": len(loads),
            "model_loads": sum(loads.values()),
            "python_worker_peak_rss_mib": round(max((report["rss"] for report in reports), default=0)),
            "backends": sorted({f"{r['backend']['backend']} {r['backend']['precision']}" for r in reports}),
            **noted,
        },
    }
    output.save(done=True, summary=done)
    return done


def session(master: str | None, app: str = "textbento bulk.spark"):
    """A SparkSession. Started here in local mode (``master`` local[...], or none outside spark-submit: pyspark's
    local[*]), its Python workers run this interpreter with this project importable; under spark-submit,
    its master and settings (examples/spark/README.md)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started this driver, and its JVM
    if master.startswith("local") if master else not submitted:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # read by pyspark's SparkContext, not a setting
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        builder = builder.config("spark.executorEnv.PYTHONPATH", path).config("spark.ui.enabled", "false")
    return builder.getOrCreate()


def main(argv: list[str] | None = None) -> dict:
    from serving.settings import settings

    from .embed import field_name, job_of, positive

    parser = argparse.ArgumentParser(prog="python -m bulk.spark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--master", help="Spark master, e.g. local[2]; default: spark-submit's, else pyspark's local[*]")
    parser.add_argument("--model", default="text-model:latest", help="BentoML store tag, or a stored model's directory")
    parser.add_argument("--ship", choices=("auto", "yes", "no"), default="auto", help="ship the model with the job (auto: unless local)")
    parser.add_argument("--input", required=True, help=".jsonl, .csv or .parquet: a path; for .jsonl and .parquet also a URI Spark reads")
    parser.add_argument("--text-field", default="text", type=field_name)
    parser.add_argument("--id-field", type=field_name, help="default: the row's number in the input")
    parser.add_argument("--output", required=True, type=Path, help="directory every executor writes to: parts, rejects, manifest.json")
    parser.add_argument("--backend", default=settings.backend, choices=BACKENDS, help="chosen on an executor (auto: there)")
    parser.add_argument("--threads", type=positive, help="the backend's threads in each Python worker; default: spark.task.cpus")
    parser.add_argument("--prompt-name", help="one of the model's prompts; default: its default prompt, if any")
    parser.add_argument("--dimensions", type=positive, help="Matryoshka: the first N dimensions, renormalized")
    parser.add_argument(
        "--vector-type", default="float32", choices=VECTOR_TYPES, help="the vector column's type, as the server's encoding_format"
    )
    parser.add_argument("--no-truncate", action="store_true", help="reject texts past the model's limit instead of cutting them")
    parser.add_argument(
        "--max-chars", type=positive, default=settings.max_chars, help="reject longer texts (default: TEXTBENTO_MAX_CHARS, as the server)"
    )
    parser.add_argument("--window", type=positive, default=8192, help="rows per Spark partition and per part")
    parser.add_argument("--dry-run", action="store_true", help="show the plan and a measured estimate; write nothing")
    args = parser.parse_args(argv)
    input_format(Path(args.input))  # an unknown format is refused before Spark starts
    source = args.input if "://" in args.input else str(Path(args.input).resolve())
    if "://" not in source and not Path(source).is_file():
        raise SystemExit(f"{args.input}: no such file")
    if args.output.exists() and not args.output.is_dir():
        raise SystemExit(f"{args.output}: not a directory; --output names the job's directory")
    from pyspark.sql import SparkSession

    started, running = time.perf_counter(), SparkSession.getActiveSession()
    spark = session(args.master)
    spark_start_s = time.perf_counter() - started
    try:
        ship = {"auto": None, "yes": True, "no": False}[args.ship]
        truncate = not args.no_truncate
        model = prepared(spark, args.model, args.backend, args.prompt_name, args.dimensions, truncate, args.threads, ship, args.vector_type)
        if args.dry_run:
            plan = dry_run(spark, model, source, args.text_field, args.id_field)
            print(json.dumps(plan, indent=1))
            return plan
        model = served(spark, model)
        tag, _ = stored_model(model_directory(args.model))
        _, records = read(spark, source, [args.text_field, *([args.id_field] if args.id_field else [])], args.max_chars)
        identity = job_of(
            args, source, input_fingerprint(spark, source), tag, model.prompt, model.computes, first_id_type(records, args.id_field)
        )
        output = Output.open(args.output, identity)
        result = run(spark, model, output, source, args.text_field, args.id_field, args.window, session_start_s=round(spark_start_s, 2))
    finally:
        if running is None:  # a session of its own: stopped (one it was given goes on)
            spark.stop()
    print(json.dumps(result, indent=1), file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
