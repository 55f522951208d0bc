"""Observability against a real server: textbento's Prometheus families from every process, the
timing headers, traces received by a real OTLP/HTTP receiver, and the Grafana dashboard's queries."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import check_timing_headers, running

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = {
    "textbento_requests": "counter",
    "textbento_rejected": "counter",
    "textbento_inflight_requests": "gauge",
    "textbento_held": "gauge",
    "textbento_request_tokens": "histogram",
    "textbento_request_texts": "histogram",
    "textbento_tokenization_seconds": "histogram",
    "textbento_queue_seconds": "histogram",
    "textbento_inference_seconds": "histogram",
    "textbento_batch_texts": "histogram",
    "textbento_batch_padded_tokens": "histogram",
    "textbento_padding_ratio": "histogram",
    "textbento_backend": "gauge",
    "textbento_backend_fidelity": "gauge",  # none where fp32, the reference, serves by speed
    "textbento_encoder_calls": "counter",
}
EMBEDDINGS = 12  # requests of 1 + i % 3 texts


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: decodes every export (protobuf) into (service, span name, attributes)."""

    spans: list[tuple[str, str, dict]] = []

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse

        export = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
        for resource_spans in export.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: a.value.int_value or a.value.string_value for a in span.attributes}
                    self.spans.append((resource.get("service.name", ""), span.name, attributes))
        body = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def receiver():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    server.shutdown()


@pytest.fixture(scope="module")
def observed(embed_tag, logs, receiver):
    """A server exporting traces to ``receiver``, with room for 2 requests in flight per worker, so
    that a burst meets the admission limit; and the answers of the traffic it was sent."""
    env = {
        "TEXTBENTO_OTLP_ENDPOINT": receiver,
        "OTEL_SERVICE_NAME": "textbento-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        "TEXTBENTO_MAX_CONCURRENCY": "2",
    }
    with running(embed_tag, logs, "observed", **env) as server:
        url = server.url
        answers = [
            requests.post(f"{url}/v1/embeddings", json={"input": [f"text {i} {j}" for j in range(1 + i % 3)]}, timeout=30)
            for i in range(EMBEDDINGS)
        ]
        bad = [requests.post(f"{url}/v1/embeddings", json={"input": []}, timeout=30) for _ in range(3)]
        with ThreadPoolExecutor(32) as pool:
            burst = list(
                pool.map(lambda i: requests.post(f"{url}/v1/embeddings", json={"input": [f"burst {i}"] * 64}, timeout=60), range(32))
            )
        time.sleep(1.5)  # the Encoder's and the workers' span processors export every 200 ms
        yield url, answers, bad, burst


def scrape(url: str) -> dict[str, object]:
    text = requests.get(f"{url}/metrics", timeout=10).text
    return {family.name: family for family in text_string_to_metric_families(text)}


def histogram_count(family) -> float:
    return sum(sample.value for sample in family.samples if sample.name.endswith("_count"))


def test_every_family_has_samples_and_counts_match_the_traffic(observed):
    url, answers, bad, burst = observed
    families = scrape(url)
    (card,) = requests.get(f"{url}/v1/models", timeout=10).json()["data"]
    for name, kind in FAMILIES.items():
        if name == "textbento_backend_fidelity" and card["fidelity"] is None:  # fp32 served: the reference itself
            continue
        assert name in families and families[name].type == kind, name
        assert families[name].samples, name
    held = {s.labels["stage"] for s in families["textbento_held"].samples}
    assert held == {"coalescer", "forgetter", "inference", "api_connections", "encoder_connections", "api_tasks", "encoder_tasks"}
    ok = sum(1 for response in answers + burst if response.status_code == 200)
    too_many = sum(1 for response in burst if response.status_code == 429)
    assert ok >= EMBEDDINGS and too_many > 0, [response.status_code for response in burst]
    # Every call to the Encoder by HTTP: with traces exported there is no socket hop (serving/socket_hop.py).
    calls = {s.labels["hop"]: s.value for s in families["textbento_encoder_calls"].samples if s.name.endswith("_total")}
    assert set(calls) == {"http"} and 1 <= calls["http"] <= ok, calls
    answered = {
        (s.labels["route"], s.labels["status"]): s.value for s in families["textbento_requests"].samples if s.name.endswith("_total")
    }
    assert answered[("/v1/embeddings", "200")] == ok
    assert answered[("/v1/embeddings", "422")] == len(bad)
    assert answered[("/v1/embeddings", "429")] == too_many
    rejected = {s.labels["reason"]: s.value for s in families["textbento_rejected"].samples if s.name.endswith("_total")}
    assert rejected == {"admission": too_many}
    # One observation per answered request, whichever worker answered it.
    for name in (
        "textbento_request_texts",
        "textbento_request_tokens",
        "textbento_tokenization_seconds",
        "textbento_queue_seconds",
        "textbento_inference_seconds",
    ):
        assert histogram_count(families[name]) == ok, name
    texts = sum(s.value for s in families["textbento_request_texts"].samples if s.name.endswith("_sum"))
    assert texts == sum(1 + i % 3 for i in range(EMBEDDINGS)) + 64 * (ok - EMBEDDINGS)
    # Per forward pass, in the Encoder: at least one pass per 64 texts, each counted once.
    passes = histogram_count(families["textbento_batch_texts"])
    assert ok - EMBEDDINGS <= passes <= ok + EMBEDDINGS  # a 64-text call fills a batch; small ones share and may be cut
    assert sum(s.value for s in families["textbento_batch_texts"].samples if s.name.endswith("_sum")) == texts  # the warm-up is not served
    assert histogram_count(families["textbento_padding_ratio"]) == passes
    assert sum(s.value for s in families["textbento_inflight_requests"].samples) == 0  # all answered (/metrics is not counted)


def test_the_served_backend_and_its_fidelity_here_are_exported(observed):
    """What ``auto`` chose at start-up and the self-check's figures: the same in /metrics and /v1/models."""
    url = observed[0]
    (card,) = requests.get(f"{url}/v1/models", timeout=10).json()["data"]
    families = scrape(url)
    (served,) = families["textbento_backend"].samples
    assert served.value == 1 and [served.labels[k] for k in ("backend", "device", "precision")] == [
        card["backend"],
        card["device"],
        card["precision"],
    ]
    if card["fidelity"] is None:  # fp32, the reference itself, served where int8 runs no faster (models.backends.chosen)
        assert "textbento_backend_fidelity" not in families
        return
    fidelity = {sample.labels["stat"]: sample.value for sample in families["textbento_backend_fidelity"].samples}
    assert card["fidelity"]["passed"] and fidelity == {key: card["fidelity"][key] for key in ("min_cosine", "mean_cosine")}


def test_timing_headers_describe_the_request(observed):
    _, answers, _, burst = observed
    for response in answers + [r for r in burst if r.status_code == 200]:
        values = check_timing_headers(response)
        assert values["x-compute-tokens"] == response.json()["usage"]["total_tokens"]


def test_spans_of_every_stage_reach_the_otlp_receiver(observed):
    spans = Receiver.spans
    names = {name for _, name, _ in spans}
    assert {"tokenize", "wait", "forward", "postprocess"} <= names, names
    assert any(name.startswith("POST /v1/embeddings") for name in names), names  # BentoML's request spans, kept when exported
    assert {service for service, _, _ in spans} == {"textbento-under-test"}
    forwards = [attributes for _, name, attributes in spans if name == "forward"]
    assert forwards and all(a["batch.texts"] >= 1 and a["batch.padded_tokens"] >= a["batch.tokens"] >= 1 for a in forwards)


def test_the_dashboard_queries_only_exported_metrics(observed):
    url = observed[0]
    exported = set()
    for family in scrape(url).values():
        exported |= {sample.name for sample in family.samples} | {family.name}
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "textbento.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(expressions) >= 8
    queried = {name for expr in expressions for name in re.findall(r"\b((?:textbento|bentoml)_[a-z_]+)", expr)}
    (card,) = requests.get(f"{url}/v1/models", timeout=10).json()["data"]
    unexported = {"textbento_backend_fidelity"} if card["fidelity"] is None else set()  # fp32 served: the reference itself
    assert queried and queried - exported == unexported, queried - exported
