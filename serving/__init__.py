"""The BentoML plumbing of textbento: what runs around the model inside ``bentoml serve``.

The rule: this package may use BentoML (its internals included, each use pinned by a test) and
aiohttp, but no inference runtime (torch, onnxruntime) and no HTTP framework of the public API
(``api/`` owns FastAPI and Starlette). ``models/`` never imports it.

- ``settings``  serving configuration from ``TEXTBENTO_*`` environment variables, derived values included
- ``coalesce``  concurrent requests' texts → fewer, larger calls to the Encoder (API workers)
- ``hop``       the call to the Encoder: sent again when the Encoder never read it, text by text when it died computing it
- ``wire``      what that call carries: token ids and rows as bytes, one chunk per call
- ``dispatch``  BentoML's adaptive batcher without its learned idle wait
- ``drain``     on SIGTERM, the Encoder answers its callers' last calls before it stops
- ``gone``      no work for clients that left or requests past their deadline, wherever it waits
- ``gpus``      a GPU per model's Encoder, or a share of the first
"""
