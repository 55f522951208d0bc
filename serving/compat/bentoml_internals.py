"""What textbento reads from BentoML's internals, unchanged, and the setting that turns off its client's recycling."""

from __future__ import annotations

from bentoml._internal.configuration.containers import BentoMLContainer
from bentoml._internal.resource import system_resources

__all__ = ["NEVER_RECYCLE", "system_resources", "tracer_provider"]

# BentoML recycles the client session to a service every 100 requests / 300 s and kills the calls
# in flight on it (HTTP 500 under concurrency, upstream #5540/#5544). Read from the callee's config
# (``runner_connection``), so it is set on the Encoder.
NEVER_RECYCLE = {"max_requests": 2**62, "max_age": 1e12}


def tracer_provider():
    """BentoML's OpenTelemetry tracer provider: OTLP when ``TEXTBENTO_OTLP_ENDPOINT`` or a BentoML ``tracing`` config sets one."""
    return BentoMLContainer.tracer_provider.get()
