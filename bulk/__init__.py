"""A whole corpus to vectors, in process: the server's tokenizer and backends without its HTTP.

The rule: no service and no HTTP here (no ``service``, FastAPI, Starlette, aiohttp, uvicorn or
BentoML's serving internals); it runs ``models`` as the Encoder does, with ``api``'s pure option
helpers (prompts, dimensions) and the ``TEXTBENTO_*`` settings.

One module, one job:

- ``corpus``  the input read as a stream of checked rows; the output's parts, rejects and manifest, written atomically
- ``embed``   the job and its command line: windows of rows through the tokenizer and the backend (docs/bulk.md)
"""
