"""serving.telemetry without a server: the timing headers from a request's record, and metrics off means nothing recorded."""

from models.inference import Pass
from serving.telemetry import Telemetry, Timing


def test_timing_headers_split_the_compute_time_into_its_stages():
    passes = [Pass(10.020, 10.030, 8, 96, 80), Pass(10.025, 10.040, 4, 64, 60)]
    timing = Timing(started=10.000, tokenized=10.005, encoded=10.041, answered=10.042, texts=3, tokens=42, passes=passes)
    assert timing.headers() == {
        "x-compute-tokens": "42",
        "x-compute-time": "42.00",
        "x-tokenization-time": "5.00",
        "x-queue-time": "15.00",  # tokenized → the first pass that carried it
        "x-inference-time": "20.00",  # the first pass's start → the last one's end
    }


def test_metrics_off_records_nothing():
    telemetry = Telemetry(enabled=False)
    timing = Timing(started=1.0, tokenized=1.1, encoded=1.3, answered=1.4, texts=1, tokens=5, passes=[Pass(1.2, 1.3, 1, 5, 5)])
    telemetry.answered("/v1/embeddings", 200)
    telemetry.rejected("timeout")
    telemetry.request(timing)
    telemetry.passes("minilm", set(timing.passes))
    with telemetry.in_flight():
        pass
    assert "families" not in vars(telemetry) and "tracer" not in vars(telemetry)  # never even created
