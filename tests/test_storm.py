"""A short disconnect storm on a fresh server of four models (``make storm`` runs 10,000 requests):
after every kind of traffic, then clients giving up at random moments on every route, nothing is
held a few seconds later and the next requests are all answered. RSS is ``make storm``'s to judge:
after a warm-up this short, an API worker's memory is still growing to its working size (+14.5%
in one run, +0.1% in the other worker)."""

import json

import pytest

from reliability.storm import check
from tests.conftest import running

pytestmark = pytest.mark.slow_proof  # test_gone and test_faults prove given-up requests and disconnects in make test


def test_a_storm_of_clients_giving_up_leaves_nothing_held(embed_tag, cross_encoder_tag, classify_tag, sparse_tag, logs):
    models = {"embed": embed_tag, "rerank": cross_encoder_tag, "classify": classify_tag, "sparse": sparse_tag}
    with running(embed_tag, logs, "storm", TEXTBENTO_MODELS=",".join(models.values())) as server:
        named = {task: tag.split(":")[0] for task, tag in models.items()}
        report = check(server, named, count=800, concurrency=64, after=200, pools_idle_s=None, rss_tolerance=None)
    print("\nstorm:", json.dumps({key: report[key] for key in ("seconds", "warm_up", "outcomes", "settled_s", "rss_change", "after")}))
    # The storm had teeth: how many answers beat their client's deadline depends on the machine's speed
    # (361 of 800 gave up on a fast CI machine, over 400 here), so the floor is a quarter, not a half.
    assert report["outcomes"]["gave up"] > 200 and report["outcomes"]["dropped mid-body"] > 40, report["outcomes"]
    assert report["passed"], report["failures"]
