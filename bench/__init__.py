"""Benchmarks, one module per make target: ``run``, ``ceiling``, ``compare``, ``rerank`` and ``telemetry_cost``
(``make bench``), ``peers`` (``bench-peers``), ``bulk`` and ``bulk_spark`` (``bench-bulk``, ``bench-bulk-spark``),
``cpu_classes``, ``gpu`` with ``gpu.sh`` (``bench-gpu``), and ``performance`` (``make report``:
docs/performance.md from the result files). ``report`` and ``baselines/`` serve ``make bench``. Result files are in
``results/``, written by ``harness.results.write_result``; the service is driven from outside, through ``harness``."""
