"""A whole corpus to vectors, in process: the server's tokenizer and backends without its HTTP.

The rule: no service and no HTTP here (no ``service``, FastAPI, Starlette, aiohttp, uvicorn or
BentoML's serving internals); it runs ``models`` as the Encoder does, with ``api``'s pure option
helpers (prompts, dimensions) and the ``TEXTBENTO_*`` settings.

One module, one job:

- ``corpus``  the input read as a stream of checked rows; the output's parts, rejects and manifest, written atomically
- ``embedder`` the stored model read from its directory, loaded once: windows of rows through its tokenizer and backend
- ``embed``   the job on one machine and its command line: the input's windows, one after another (docs/bulk.md)
- ``spark``   the same job on Apache Spark, a window per partition, and ``embed_texts`` for any DataFrame (pyspark: not served)
"""
