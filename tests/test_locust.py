"""locustfile.py, run headless by Locust against real served instances: every request answered as
expected (documented 4xx included), and only the served models' tasks' traffic sent."""

from __future__ import annotations

import csv
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import running

ROOT = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).with_name("locust"))
SLOW = pytest.mark.slow_proof  # make test-slow-proofs: each task served alone; "several" serves these three tasks at once
# (model fixtures, the served tasks' routes, a route no served model does)
MODELS = [
    pytest.param((["embed_tag"], ["/v1/embeddings", "/v2/embed"], "/v1/classify"), id="embed", marks=SLOW),
    pytest.param((["classify_tag"], ["/v1/classify"], "/v1/embeddings"), id="classify", marks=SLOW),
    pytest.param((["cross_encoder_tag"], ["/v1/rerank"], "/v1/embeddings"), id="rerank", marks=SLOW),
    pytest.param((["sparse_tag"], ["/embed_sparse"], "/v1/embeddings"), id="sparse"),
    pytest.param((["several_server"], ["/v1/embeddings", "/v1/rerank", "/v1/classify"], "/embed_sparse"), id="several"),
]


@pytest.fixture(scope="module", params=MODELS)
def server(request, logs):
    """A server of its own, not the shared ``embed_url``: BentoML's batcher sheds by a latency per call
    learnt from recent batches, and after this mix of long many-text calls the shared server answered
    hundreds of test_overload's one-text calls with 503 (measured in the full suite). The three models
    together are served as test_several_models serves them, by that server (its tests ask for no speed)."""
    fixtures, own, other = request.param
    if fixtures == ["several_server"]:
        yield request.getfixturevalue("several_server").url, own, other
        return
    tags = [request.getfixturevalue(fixture) for fixture in fixtures]
    with running(tags[0], logs, f"locust-{request.param_index}", TEXTBENTO_MODELS=",".join(tags)) as server:
        yield server.url, own, other


def run_locust(url: str, reports: Path) -> dict[str, dict[str, str]]:
    """5 s of 4 users; the CSV stats by request name. Locust exits 1 on any failure."""
    command = [LOCUST, "-f", "locustfile.py", "--headless", "--only-summary", "--host", url, "-u", "4", "-r", "4", "-t", "5s"]
    # --stop-timeout lets requests in flight at the 5 s mark finish and count.
    command += ["--stop-timeout", "20", "--csv", str(reports / "locust")]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(reports / "locust_stats.csv", newline="") as stats:
        return {row["Name"]: row for row in csv.DictReader(stats)}


def test_locust_traffic_gets_the_expected_answers(server, tmp_path):
    """Every run free of failures and of the other task's route; every served route requested, over up to
    three runs: Locust picks each request's task at random, and a slow CPU answers few in 5 s."""
    url, own, other = server
    requested = Counter()
    for run in range(3):
        (reports := tmp_path / str(run)).mkdir()
        stats = run_locust(url, reports)
        total = stats.pop("Aggregated")
        assert int(total["Request Count"]) > 0 and int(total["Failure Count"]) == 0
        assert other not in stats  # the other task's route only gets the bad "wrong task" request, named apart
        requested.update({route: int(row["Request Count"]) for route, row in stats.items()})
        if all(requested[route] > 0 for route in own):
            break
    assert all(requested[route] > 0 for route in own), requested
