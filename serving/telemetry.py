"""What every request and every forward pass tells the operator: Prometheus families, timing
headers and trace spans, from one record per request (``Timing``).

Prometheus: ``prometheus_client`` in BentoML's multi-process mode, so the families of every API
worker and of the Encoder come out of one ``/metrics``. BentoML points ``PROMETHEUS_MULTIPROC_DIR``
at its directory only after importing the service, so the families are created on first use,
never at import. Traces: spans under BentoML's request span, from its tracer provider (OTLP when
``TEXTBENTO_OTLP_ENDPOINT`` is set); the queue wait and the forward passes happened elsewhere
(the coalescer, the Encoder), so their spans are written afterwards from the recorded times.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace

from models.inference import Pass

from .settings import settings

SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TEXTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
TOKENS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536)
PADDING = (1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
# error.type of the answers that turn work away, by the reason operators read in textbento_rejected_total.
REJECTIONS = {
    "too_many_requests": "admission",
    "overloaded": "shed",
    "runner_unavailable": "unavailable",
    "unhealthy": "unavailable",
    "timeout": "timeout",
    "body_timeout": "slow_body",
    "body_budget": "body_budget",
}


@dataclass
class Timing:
    """One request's way through the service, in wall-clock seconds (``time.time()``)."""

    started: float = field(default_factory=time.time)
    tokenized: float = 0.0
    encoded: float = 0.0  # the last of its texts came back from the Encoder
    answered: float = 0.0
    model: str = ""  # the served model's name
    texts: int = 0
    tokens: int = 0
    passes: list[Pass] = field(default_factory=list)  # the forward passes that carried its texts, each once

    @property
    def first_pass(self) -> float:
        return min(p.started for p in self.passes)

    @property
    def last_pass(self) -> float:
        return max(p.finished for p in self.passes)

    def headers(self) -> dict[str, str]:
        """TEI's timing headers, in milliseconds: where this request's time went."""
        seconds = {
            "x-compute-time": self.answered - self.started,
            "x-tokenization-time": self.tokenized - self.started,
            "x-queue-time": max(0.0, self.first_pass - self.tokenized),
            "x-inference-time": self.last_pass - self.first_pass,
        }
        return {"x-compute-tokens": str(self.tokens), **{name: f"{value * 1000:.2f}" for name, value in seconds.items()}}


def forget_dead_processes() -> None:
    """Drop the live gauges of processes that are gone. A SIGKILLed or crashed process cannot remove its
    own (its requests in flight would stay in the in-progress gauges for good), so every API worker
    looks for them as it starts and at each sample of ``textbento_held``. Two workers may remove
    the same file at once: whoever comes second finds it gone."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    for path in Path(directory).glob("gauge_live*_*.db") if directory else ():
        if not alive(int(path.stem.rsplit("_", 1)[1])):
            path.unlink(missing_ok=True)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):  # no procfs: trust the signal
        return True
    return state not in ("Z", "X")


class Telemetry:
    """The service's Prometheus families and spans; every method is a no-op when ``enabled`` is false,
    and no span is made when nothing would export it (``traced`` false)."""

    def __init__(self, enabled: bool, traced: bool = False) -> None:
        self.enabled, self.traced = enabled, enabled and traced

    @cached_property
    def families(self) -> SimpleNamespace:
        import prometheus_client as prom  # here: after BentoML has set PROMETHEUS_MULTIPROC_DIR

        return SimpleNamespace(
            requests=prom.Counter("textbento_requests", "answers by route and HTTP status", ["route", "status"]),
            rejected=prom.Counter("textbento_rejected", "requests turned away, by reason", ["reason"]),
            inflight=prom.Gauge("textbento_inflight_requests", "requests being answered", multiprocess_mode="livesum"),
            # What each stage holds now, summed over processes: all back to their idle level once traffic stops.
            held=prom.Gauge(
                "textbento_held", "work and resources held now, by stage, sampled each second", ["stage"], multiprocess_mode="livesum"
            ),
            # Per served model (a label bounded by the configured set): each has its own Encoder and batches.
            request_tokens=prom.Histogram("textbento_request_tokens", "tokens per request", ["model"], buckets=TOKENS),
            request_texts=prom.Histogram("textbento_request_texts", "texts per request", ["model"], buckets=TEXTS),
            tokenization=prom.Histogram("textbento_tokenization_seconds", "tokenizing a request", ["model"], buckets=SECONDS),
            queue=prom.Histogram(
                "textbento_queue_seconds",
                "from tokenized to the start of the first forward pass carrying the request",
                ["model"],
                buckets=SECONDS,
            ),
            inference=prom.Histogram("textbento_inference_seconds", "the forward passes carrying the request", ["model"], buckets=SECONDS),
            batch_texts=prom.Histogram("textbento_batch_texts", "texts per forward pass", ["model"], buckets=TEXTS),
            batch_padded_tokens=prom.Histogram(
                "textbento_batch_padded_tokens", "padded tokens per forward pass", ["model"], buckets=TOKENS
            ),
            padding_ratio=prom.Histogram("textbento_padding_ratio", "padded / real tokens per forward pass", ["model"], buckets=PADDING),
            backend=prom.Gauge(
                "textbento_backend",
                "the backend served (1), by model, name, device and precision",
                ["model", "backend", "device", "precision"],
                multiprocess_mode="livemax",
            ),
            trial_speed=prom.Gauge(
                "textbento_backend_trial_texts_per_s",
                "what auto weighed at start-up: each compute's texts/s over the probe here (served: 1 for the one chosen)",
                ["model", "backend", "precision", "served"],
                multiprocess_mode="livemax",
            ),
            # A label bounded by the configured models and the two hops.
            encoder_calls=prom.Counter(
                "textbento_encoder_calls",
                "calls from the API workers to a model's Encoder, by hop: socket, or http (the socket unreachable, or the hop set to HTTP)",
                ["model", "hop"],
            ),
            fidelity=prom.Gauge(
                "textbento_backend_fidelity",
                "the served fast graph against fp32 on the start-up probe (cosines; sparse: flipped mass; multi-vector: MaxSim error)",
                ["model", "stat"],
                multiprocess_mode="livemax",
            ),
        )

    @cached_property
    def tracer(self):
        from .compat.bentoml_internals import tracer_provider

        return tracer_provider().get_tracer("textbento")

    def answered(self, route: str, status: int) -> None:
        if self.enabled:
            self.families.requests.labels(route, str(status)).inc()

    def rejected(self, error_type: str) -> None:
        if self.enabled and error_type in REJECTIONS:
            self.families.rejected.labels(REJECTIONS[error_type]).inc()

    def encoder_call(self, model: str, hop: str) -> None:
        if self.enabled:
            self.families.encoder_calls.labels(model, hop).inc()

    def dropped(self, reason: str) -> None:
        """A request's work dropped because nobody waits for it: ``gone`` (its client left) or ``deadline`` (``serving/gone.py``)."""
        if self.enabled:
            self.families.rejected.labels(reason).inc()

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        self.families.inflight.inc()
        try:
            yield
        finally:
            self.families.inflight.dec()

    def sample_held(self, stages: Mapping[str, Callable[[], int]], every_s: float = 1.0, sweep: bool = False) -> None:
        """From now on, each stage's count into ``textbento_held{stage}`` every ``every_s`` (a task on the
        running loop), and the gauges of dead processes dropped before each sample when ``sweep``."""
        if not self.enabled:
            return

        async def sample() -> None:
            while True:
                if sweep:
                    forget_dead_processes()
                for stage, count in stages.items():
                    self.families.held.labels(stage).set(count())
                await asyncio.sleep(every_s)

        self.sampler = asyncio.get_running_loop().create_task(sample())

    def request(self, timing: Timing) -> None:
        """An answered request: its sizes and stage times, and a span per stage under BentoML's request span."""
        if not self.enabled:
            return
        f, first, last, model = self.families, timing.first_pass, timing.last_pass, timing.model
        f.request_texts.labels(model).observe(timing.texts)
        f.request_tokens.labels(model).observe(timing.tokens)
        f.tokenization.labels(model).observe(timing.tokenized - timing.started)
        f.queue.labels(model).observe(max(0.0, first - timing.tokenized))
        f.inference.labels(model).observe(last - first)
        if not self.traced:
            return
        self._span("tokenize", timing.started, timing.tokenized, {"request.texts": timing.texts, "request.tokens": timing.tokens})
        self._span("wait", timing.tokenized, max(first, timing.tokenized))
        for p in sorted(timing.passes):
            self._span(
                "forward", p.started, p.finished, {"batch.texts": p.texts, "batch.padded_tokens": p.padded_tokens, "batch.tokens": p.tokens}
            )
        self._span("postprocess", timing.encoded, timing.answered)

    def _span(self, name: str, start: float, end: float, attributes: dict | None = None) -> None:
        self.tracer.start_span(name, start_time=int(start * 1e9), attributes=attributes).end(end_time=int(end * 1e9))

    def backend(self, model: str, backend) -> None:
        """An Encoder's backend as served, and the fidelity its self-check measured (``models.selfcheck``)."""
        if not self.enabled:
            return
        self.families.backend.labels(model, backend.name, backend.device, backend.precision).set(1)
        if backend.fidelity is not None:
            self.families.fidelity.labels(model, "min_cosine").set(backend.fidelity.min_cosine)
            self.families.fidelity.labels(model, "mean_cosine").set(backend.fidelity.mean_cosine)
            for stat in ("max_flipped_mass", "max_maxsim_error"):  # sparse and multi-vector models' own gates
                if (value := getattr(backend.fidelity, stat)) is not None:
                    self.families.fidelity.labels(model, stat).set(value)
        for trial in backend.trials:
            if trial.texts_per_s is not None:
                self.families.trial_speed.labels(model, trial.backend, trial.precision, str(int(trial.served))).set(trial.texts_per_s)

    def passes(self, model: str, passes: set[Pass]) -> None:
        """An Encoder's forward passes (each once, however many texts of it went to how many calls)."""
        if not self.enabled:
            return
        f = self.families
        for p in passes:
            f.batch_texts.labels(model).observe(p.texts)
            f.batch_padded_tokens.labels(model).observe(p.padded_tokens)
            f.padding_ratio.labels(model).observe(p.padded_tokens / max(p.tokens, 1))


telemetry = Telemetry(settings.metrics, traced=bool(settings.otlp_endpoint))
