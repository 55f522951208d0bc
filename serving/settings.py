"""Serving configuration, read once per process from ``TEXTBENTO_*`` environment variables."""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _built_in_model() -> str:
    """The tag a bento was built for (``bentoml build --arg model=<tag>``), else the default name."""
    import bentoml

    return getattr(bentoml.use_arguments(), "model", None) or "text-model:latest"


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Settings(BaseSettings):
    """Every knob of the service; each field is ``TEXTBENTO_<FIELD>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="TEXTBENTO_")

    model: str = Field(default_factory=_built_in_model, description="BentoML store tag of the served model")
    models: str = Field(
        "", description="comma-separated store tags served together by one server, each by an Encoder of its own; empty: model alone"
    )
    backend: Literal["auto", "torch", "onnx", "onnx-int8", "openvino"] = Field(
        "auto",
        description="inference backend of the Encoder; auto: onnx fp16 on CUDA; on CPU the fastest here of fp32 and onnx-int8 that"
        " passes the start-up self-check (where int8 misses: int8 with Q/K/V in fp32, and openvino's bf16 with AMX, where installed),"
        " int8 only where it runs 1.1x fp32; torch without ONNX graphs",
    )
    # "cpu_count" is resolved by BentoML where the service runs, not where the bento was built.
    workers: Annotated[int, Field(ge=1)] | Literal["cpu_count"] = Field("cpu_count", description="API/tokenizer worker processes")
    # On a CPU each thread runs a slice of every pass on a single-threaded ONNX Runtime session, and
    # a lone text gets all of them (models/backends/onnx_backend.Streams; docs/design.md 9).
    runner_threads: int = Field(default_factory=_cpu_count, ge=1, description="CPU threads of each Encoder")
    trust_remote_code: bool = Field(
        False, description="let the torch backend run a custom-code model's code (imported with --trust-remote-code); ONNX never runs it"
    )
    # The size limits, each where it does a job: an API worker's call to the Encoder carries at
    # most max_batch_size texts (the coalescer cuts and merges requests to it), so that BentoML's
    # batcher, which merges calls up to the same limit, never has to refuse one; token_budget
    # then cuts each merged batch into forward passes (models/batching.py).
    max_batch_size: int = Field(64, ge=2, description="most texts in one adaptive batch")
    # BentoML's batcher predicts latency per *call*, whatever its number of texts, so a mix of big
    # and small requests inflates the prediction; shedding only what would time out anyway keeps
    # it from refusing work that would have been answered (503s at concurrency 256 otherwise).
    max_latency_ms: int | None = Field(
        None, ge=1, description="adaptive batcher sheds (503) past this predicted latency; default: the timeout"
    )
    # serving/hop.py: a keep-alive race with the Encoder's server, or the Encoder restarting. A call the
    # Encoder read and died computing is not sent again whole: its texts are, alone, once each.
    encoder_attempts: int = Field(
        3, ge=1, description="times a call the Encoder never read is sent (1: a call is never sent again, in whole or text by text)"
    )
    # serving/socket_hop.py; docs/design.md 8.
    encoder_hop: Literal["socket", "http"] = Field(
        "socket", description="how the API workers call the Encoders: a Unix socket of each Encoder's own, or BentoML's HTTP"
    )
    # serving/coalesce.py; docs/design.md 6.
    calls_in_flight: int = Field(
        2, ge=1, description="calls to the Encoder in flight per API worker; texts arriving meanwhile share the next"
    )
    # It sets the Encoder's memory (ONNX Runtime's arena keeps [budget, FFN width] intermediates);
    # past about 2,000 tokens a pass gains no speed (docs/operations.md, Memory).
    token_budget: int = Field(2048, ge=1, description="most padded tokens in one forward pass")
    timeout_s: int = Field(60, ge=1, description="a request not answered by then gets 504")
    max_inputs: int = Field(256, ge=1, description="most texts in one request's list; a rerank's query is not counted (more → 413)")
    max_chars: int = Field(20_000, ge=1, description="longest text in characters (longer → 413)")
    # Answers that grow with the tokens read, bounded as their memory is: 2^17 tokens is what 256 texts of
    # a 512-token model send; 2^22 numbers (16 MiB of float32, ~80 MB of JSON) are 32 documents of 1,024
    # tokens at 128 dimensions, twice what TEI's defaults let /embed_all answer (32 texts of 512 tokens).
    max_tokenize_tokens: int = Field(2**17, ge=1, description="most tokens /tokenize lists for one request (more → 413)")
    max_answer_values: int = Field(
        2**22, ge=1, description="most numbers in one token-vector or sparse answer: tokens × dimensions, or non-zero weights (more → 413)"
    )
    max_body_bytes: int = Field(8 * 2**20, ge=1024, description="largest request body (larger → 413)")
    body_budget_bytes: int = Field(
        128 * 2**20,
        ge=1024,
        description="bytes of request bodies an API worker holds at once, of the requests it reads or answers (more → 503)",
    )
    # serving/connections.py. Each open connection holds a file descriptor: see docs/operations.md on sizing the pod's limit.
    header_timeout_s: float = Field(
        10.0, gt=0, description="a connection whose request headers are not complete this long after its first byte is closed"
    )
    # One deadline for the whole body, as for the headers: a trickle of bytes resets no clock. 30 s lets the
    # largest body (max_body_bytes, 8 MiB) arrive at 280 KB/s and leaves half of timeout_s to answer it.
    body_timeout_s: float = Field(
        30.0, gt=0, description="a request whose body is not complete this long after its headers gets 408, and its connection is closed"
    )
    keep_alive_s: float = Field(5.0, gt=0, description="an idle client connection is closed after this long")
    max_concurrency: int = Field(512, ge=1, description="requests in flight per API worker and served model (more → 429)")
    api_keys: str = Field("", description="comma-separated bearer keys; unset or empty → no authentication; set but no key → no start")
    api_keys_file: str = Field("", description="file with one bearer key per line, added to api_keys; missing or without a key → no start")
    metrics_public: bool = Field(True, description="whether /metrics stays open when keys are set")
    metrics: bool = Field(True, description="textbento's Prometheus families and trace spans (off: BentoML's only)")
    otlp_endpoint: str = Field("", description="OTLP/HTTP traces endpoint (e.g. http://collector:4318/v1/traces); empty: no traces")
    trace_sample_rate: float = Field(1.0, ge=0, le=1, description="share of requests traced when otlp_endpoint is set")

    @property
    def socket_hop(self) -> bool:
        """Whether the Encoders' calls go on their own sockets: not where traces are exported, which follow HTTP calls only."""
        return self.encoder_hop == "socket" and not self.otlp_endpoint

    @property
    def tracing(self) -> dict:
        """BentoML's tracing configuration of each service: OTLP over HTTP when an endpoint is set."""
        if not self.otlp_endpoint:
            return {}
        return {
            "exporter_type": "otlp",
            "sample_rate": self.trace_sample_rate,
            "otlp": {"protocol": "http", "endpoint": self.otlp_endpoint},
        }

    @model_validator(mode="after")
    def _derive(self) -> Settings:
        if self.max_latency_ms is None:
            self.max_latency_ms = self.timeout_s * 1000  # shed only what would time out anyway
        self.keys()  # a key setting that yields no key refuses to start, in every process, before anything loads
        if self.body_budget_bytes < self.max_body_bytes:
            budget, largest = self.body_budget_bytes, self.max_body_bytes
            raise ValueError(
                f"TEXTBENTO_BODY_BUDGET_BYTES ({budget}) is under TEXTBENTO_MAX_BODY_BYTES ({largest}): no largest body would fit"
            )
        return self

    @property
    def model_tags(self) -> list[str]:
        """The store tags served, in order: ``models`` when set, else ``model``. The order says which
        model answers a request that names none (the first one that does the route's task)."""
        tags = [tag.strip() for tag in self.models.split(",") if tag.strip()] or [self.model]
        names = [tag.partition(":")[0] for tag in tags]
        if twice := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"TEXTBENTO_MODELS names {', '.join(twice)} more than once; serve one version of each model")
        return tags

    @property
    def api_workers(self) -> int:
        return self.workers if isinstance(self.workers, int) else _cpu_count()

    @property
    def backstop_timeout_s(self) -> int:
        """BentoML's own timeout of the API service: behind ``timeout_s``, so that the API answers first, in its error shape."""
        return self.timeout_s + BACKSTOP_MARGIN_S

    @property
    def drain_longest_s(self) -> int:
        """Longest the Encoder defers its SIGTERM: a request accepted just before may need it until its backstop."""
        return self.backstop_timeout_s

    def keys(self) -> list[str]:
        """Every configured API key (the variable's and the file's), blanks dropped; none when neither is set.

        Authentication fails closed: a setting that is set but yields no key (``" , "``, an empty file, a
        file that cannot be read: a Secret not mounted) raises ``NoKeys`` naming it, rather than serve an
        open API to someone who meant to close it.
        """
        from pathlib import Path

        from_variable = [key.strip() for key in self.api_keys.split(",") if key.strip()]
        if self.api_keys and not from_variable:
            raise NoKeys("TEXTBENTO_API_KEYS is set but holds no key (only commas and blanks); unset it to serve without keys")
        if not self.api_keys_file:
            return from_variable
        try:
            lines = Path(self.api_keys_file).read_text().splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise NoKeys(f"TEXTBENTO_API_KEYS_FILE={self.api_keys_file} cannot be read: {error}") from None
        if not (from_file := [key.strip() for key in lines if key.strip()]):
            raise NoKeys(f"TEXTBENTO_API_KEYS_FILE={self.api_keys_file} holds no key (one per line); unset it to serve without keys")
        return from_variable + from_file


class NoKeys(RuntimeError):
    """A key setting is set but yields no key. Not a ``ValueError``: pydantic would wrap that with the
    settings' values, the keys among them, into its message."""


BACKSTOP_MARGIN_S = 5
# The Encoder's idle keep-alive outlasts its client's (BentoML's aiohttp session keeps an idle
# connection 15 s), so only the client closes idle connections between the two (serving/connections.py).
ENCODER_KEEP_ALIVE_S = 60.0

settings = Settings()
