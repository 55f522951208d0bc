"""A sample of the Grafana dashboard (deploy/grafana/textbento.json) without Grafana: its panels'
queries evaluated on /metrics scraped during a short, varied load, drawn with matplotlib.

    python -m bench.studies.dashboard_sample [--model TAG]    # → bench/results/dashboard-sample.png

Load, in phases of 20 s, with an admission limit of 8 requests per API worker: 1 text per request
at c=6, 32 texts per request at c=4, then 1 text at c=64, past the limit (so that the rejections
panel has something).
Rates and quantiles are computed between consecutive scrapes (2 s), as PromQL's ``rate`` and
``histogram_quantile`` would.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections import defaultdict

import requests
from prometheus_client.parser import text_string_to_metric_families

from bench import RESULTS
from harness.load import closed_loop
from harness.serving import serve
from harness.texts import short_texts

ADMISSION = 8  # requests in flight per API worker: the last phase goes past it
PHASES = [("1 text, c=6", 1, 6), ("32 texts, c=4", 32, 4), ("1 text, c=64 (past admission)", 1, 64)]
PHASE_S = 20
SCRAPE_S = 2.0


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    samples: dict[tuple[str, tuple], float] = defaultdict(float)
    for family in text_string_to_metric_families(requests.get(f"{url}/metrics", timeout=10).text):
        for sample in family.samples:
            labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k in ("route", "status", "reason", "le")))
            samples[(sample.name, labels)] += sample.value  # summed over workers, as sum by (...) does
    return samples


def delta(now: dict, before: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v - before.get(k, 0.0) for k, v in now.items() if k[0] == name and want <= set(k[1]))


def quantile(now: dict, before: dict, family: str, q: float) -> float | None:
    buckets = sorted(
        (float("inf") if dict(k[1])["le"] == "+Inf" else float(dict(k[1])["le"]), v - before.get(k, 0.0))
        for k, v in now.items()
        if k[0] == f"{family}_bucket"
    )
    merged: dict[float, float] = defaultdict(float)
    for bound, count in buckets:
        merged[bound] += count
    bounds = sorted(merged)
    total = merged[bounds[-1]] if bounds else 0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if merged[bound] >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(merged[bound] - below, 1e-9)
        lower, below = bound, merged[bound]
    return None


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="bench-minilm:latest")
    args = parser.parse_args()
    texts = short_texts(2048)
    scrapes: list[tuple[float, dict]] = []
    with serve(env={"TEXTBENTO_MODEL": args.model, "TEXTBENTO_MAX_CONCURRENCY": str(ADMISSION)}) as server:
        stop, started = threading.Event(), time.monotonic()

        def scraper() -> None:
            while not stop.wait(SCRAPE_S):
                scrapes.append((time.monotonic() - started, scrape(server.url)))

        thread = threading.Thread(target=scraper)
        thread.start()
        for label, per_request, concurrency in PHASES:
            print(f"{time.monotonic() - started:5.0f} s  {label}", flush=True)
            body = lambda i, k=per_request: {"input": [texts[(i * k + j) % len(texts)] for j in range(k)]}
            asyncio.run(closed_loop(f"{server.url}/v1/embeddings", body, concurrency=concurrency, requests=10**6, deadline_s=PHASE_S))
        stop.set()
        thread.join()
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (_, before), (t, now) in zip(scrapes, scrapes[1:]):
        span = SCRAPE_S
        for status in ("200", "429"):
            series[f"answers {status}/s"].append(
                (t, delta(now, before, "textbento_requests_total", route="/v1/embeddings", status=status) / span)
            )
        series["rejected admission/s"].append((t, delta(now, before, "textbento_rejected_total", reason="admission") / span))
        for family, name in [
            ("textbento_tokenization_seconds", "tokenize"),
            ("textbento_queue_seconds", "queue"),
            ("textbento_inference_seconds", "inference"),
            ("bentoml_service_request_duration_seconds", "request"),
        ]:
            for q in (0.5, 0.99):
                value = quantile(now, before, family, q)
                if value is not None:
                    series[f"{name} p{int(q * 100)} (ms)"].append((t, value * 1000))
        for family, name in [
            ("textbento_batch_texts", "texts per pass"),
            ("textbento_padding_ratio", "padding ratio"),
            ("textbento_batch_padded_tokens", "padded tokens per pass"),
        ]:
            count = delta(now, before, f"{family}_count")
            if count:
                series[f"{name} (mean)"].append((t, delta(now, before, f"{family}_sum") / count))
        series["in flight"].append((t, sum(v for k, v in now.items() if k[0] == "textbento_inflight_requests")))
    panels = [
        ("Answers by status (/v1/embeddings)", ["answers 200/s", "answers 429/s"]),
        ("Request latency (BentoML)", ["request p50 (ms)", "request p99 (ms)"]),
        ("Time per stage", ["tokenize p50 (ms)", "queue p50 (ms)", "queue p99 (ms)", "inference p50 (ms)", "inference p99 (ms)"]),
        ("Texts per forward pass", ["texts per pass (mean)"]),
        ("Padded tokens per forward pass", ["padded tokens per pass (mean)"]),
        ("Padding ratio", ["padding ratio (mean)"]),
        ("Requests in flight", ["in flight"]),
        ("Rejections by reason", ["rejected admission/s"]),
    ]
    figure, axes = plt.subplots(2, 4, figsize=(20, 8))
    for axis, (title, names) in zip(axes.flat, panels):
        for name in names:
            if series[name]:
                axis.plot(*zip(*series[name]), label=name)
        for boundary in range(PHASE_S, PHASE_S * len(PHASES), PHASE_S):
            axis.axvline(boundary, color="grey", linewidth=0.5)
        axis.set_title(title)
        axis.set_xlabel("s")
        axis.legend(fontsize=7)
    phases = " | ".join(label for label, _, _ in PHASES)
    figure.suptitle(f"textbento dashboard panels from scraped /metrics, admission {ADMISSION}/worker: {phases}", fontsize=10)
    figure.tight_layout()
    figure.savefig(RESULTS / "dashboard-sample.png", dpi=80)
    print(f"wrote {RESULTS / 'dashboard-sample.png'}")


if __name__ == "__main__":
    main()
