"""A short chaos run (``make chaos`` runs 30 minutes): one SIGKILL of the Encoder, one of an API
worker, under mixed traffic at c=64; reliability/chaos.py judges what every request got."""

import pytest

from reliability import chaos

pytestmark = pytest.mark.slow_proof  # test_faults kills the Encoder and an API worker in make test; here, under a minute of load


def test_kills_under_load_lose_nothing_and_throughput_recovers(embed_tag, tmp_path):
    seconds = 60  # each kill has 20 s before it, and the Encoder is back within 10 s of its kill
    verdict = chaos.judge(chaos.run(embed_tag, seconds, [(20, "encoder"), (40, "API worker")], tmp_path / "server.log"), seconds)
    print("\nchaos:", {k: verdict[k] for k in ("requests", "statuses", "dropped_connections_at_worker_kills", "slowest_s", "rss_growth")})
    for kill in verdict["kills"]:
        print("  ", {k: kill.get(k) for k in ("what", "at_s", "replacement_started_s", "throughput_before", "back_at_s")})
    assert verdict["passed"], verdict["failures"]
    assert len(verdict["kills"]) == 2 and all(kill["replacement_started_s"] for kill in verdict["kills"])
