"""The BentoML plumbing of textbento: what runs around the model inside ``bentoml serve``.

The rule: this package may use BentoML, uvicorn, Starlette and aiohttp, but no inference runtime
(torch, onnxruntime) and not FastAPI (``api/`` owns the public API). Other libraries' internals are
touched in ``compat`` only, each patch there checked against the version it was written for.
``models/`` never imports this package.

- ``compat``       every patch of BentoML's and uvicorn's internals, behind one ``apply()`` that checks their versions
- ``wiring``       a BentoML service per served model's Encoder, and the API service's dependency on each
- ``settings``     serving configuration from ``TEXTBENTO_*`` environment variables, derived values included
- ``coalesce``     concurrent requests' texts → fewer, larger calls to the Encoder (API workers)
- ``hop``          the call to the Encoder: sent again when the Encoder never read it, text by text when it died computing it
- ``socket_hop``   that call on a Unix socket of the Encoder's own, into its batcher, HTTP where the socket cannot be reached
- ``wire``         what that call carries: token ids and rows as bytes, one chunk per call
- ``connections``  each service's connection deadlines, and the connections and requests its server holds now
- ``drain``        on SIGTERM, the Encoder answers its callers' last calls before it stops
- ``gone``         no work for clients that left or requests past their deadline, wherever it waits
- ``gpus``         a GPU per model's Encoder, or a share of the first
- ``telemetry``    Prometheus families, timing headers and trace spans, from one record per request
"""
