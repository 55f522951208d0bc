"""The rerank point: 1 query × 32 documents per request at c=8, textbento against the naive baseline.

    python -m bench.rerank             # → bench/results/rerank.json

The model: all-MiniLM-L6-v2's encoder with a one-logit head (the shape of ms-marco-MiniLM-L6
cross-encoders; random head, so the cost is real and the ranking is not), imported as
``bench-cross-encoder``. textbento serves its default backend; the naive FastAPI app of the seed
article runs transformers on the same weights (``bench/baselines``). Short texts of 5-30 words.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import bentoml

from harness.load import closed_loop
from harness.results import write_result
from harness.serving import serve
from harness.texts import short_texts

MODEL = "bench-cross-encoder"
SYSTEMS = {"textbento": ("service:TextBento", False), "naive-fastapi": ("bench.baselines.fastapi_apps:naive", True)}


def cross_encoder_tag() -> str:
    from transformers import AutoTokenizer, BertForSequenceClassification

    from models.store import default_model_dir, import_model

    try:
        return str(bentoml.models.get(f"{MODEL}:latest").tag)
    except bentoml.exceptions.NotFound:
        directory = Path(tempfile.mkdtemp(prefix="cross-encoder-"))
        BertForSequenceClassification.from_pretrained(str(default_model_dir()), num_labels=1).save_pretrained(directory)
        AutoTokenizer.from_pretrained(str(default_model_dir())).save_pretrained(directory)
        return str(import_model(directory, name=MODEL))


def main(seconds: float = 10) -> None:
    tag = cross_encoder_tag()
    texts = short_texts(2048)
    body = lambda i: {"query": texts[i % 2048], "documents": [texts[(i * 32 + j) % 2048] for j in range(32)]}
    rows = {}
    for name, (target, factory) in SYSTEMS.items():
        with serve(target, env={"TEXTBENTO_MODEL": tag}, uvicorn_factory=factory) as server:
            url = server.url + "/v1/rerank"
            asyncio.run(closed_loop(url, body, concurrency=8, requests=16, deadline_s=30))  # warm-up
            result = asyncio.run(closed_loop(url, body, concurrency=8, requests=10**6, deadline_s=seconds, texts_per_request=32))
        rows[name] = result.summary()
        print(name, json.dumps(rows[name]), flush=True)
    report = {
        "model": tag,
        "point": "1 query x 32 documents per request, c=8",
        "systems": rows,
        "pairs_per_s_ratio": round(rows["textbento"]["texts_per_s"] / rows["naive-fastapi"]["texts_per_s"], 2),
    }
    write_result("rerank.json", report, indent=2)


if __name__ == "__main__":
    main()
