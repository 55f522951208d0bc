"""spark-submit job: a corpus to ``bulk.embed``'s files (Parquet parts, rejects, manifest) on a Spark cluster.

    spark-submit --master yarn --deploy-mode client --py-files build/spark/textbento.zip \\
        --conf spark.executor.cores=4 --conf spark.task.cpus=1 --conf spark.executor.memoryOverhead=3g \\
        examples/spark/embed_corpus.py --model text-model:latest --input hdfs:///corpora/docs.jsonl \\
        --id-field id --output /mnt/shared/vectors/

Its options are ``python -m bulk.spark``'s; examples/spark/README.md explains what travels and the
cluster's settings. Without ``--master`` it runs where spark-submit sends it.
"""

from __future__ import annotations

import sys

from bulk.spark import main

if __name__ == "__main__":
    main(sys.argv[1:])
