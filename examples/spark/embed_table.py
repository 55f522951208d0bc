"""spark-submit job: vectors as columns of a table, written by Spark's own writer (object stores, tables).

    spark-submit ... --py-files build/spark/textbento.zip examples/spark/embed_table.py \\
        --model text-model:latest s3a://bucket/docs.parquet s3a://bucket/docs-vectors/

Reads a Parquet table with a text column, adds ``vector`` (array<float>), ``tokens`` and ``reason``
with ``bulk.spark.embed_texts`` (the same vectors as ``bulk.embed``; each Python worker loads the
model once), and writes every column as Parquet. The rows with a reason are the rejects: no vector,
and why. For ``bulk.embed``'s own files in a directory the executors share, use embed_corpus.py.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from bulk.spark import embed_texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="a Parquet table Spark reads (a path or a URI)")
    parser.add_argument("target", help="where Spark writes the table with its vectors")
    parser.add_argument("--model", default="text-model:latest", help="a store tag on the driver, or a stored model's directory")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--backend", default="onnx-int8", help="one backend on every executor (auto: each executor's own check)")
    args = parser.parse_args()
    spark = SparkSession.builder.appName("textbento embed_texts").getOrCreate()
    frame = embed_texts(spark.read.parquet(args.source), args.model, text_column=args.text_column, backend=args.backend)
    frame.write.mode("errorifexists").parquet(args.target)
    spark.stop()


if __name__ == "__main__":
    main()
