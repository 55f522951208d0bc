"""The benchmarks' own arithmetic and floors, in process: the figures of docs/ come from these."""

import asyncio
import importlib
import inspect

import pytest

from bench import timeline
from bench.compare import points
from bench.hop import HOP, MOUNTED, SOLO, bare_round_trip_ms, summary


def test_compare_points_are_pairs_of_texts_and_concurrency():
    assert points("1x1,32x8") == [(1, 1), (32, 8)]
    for malformed in ("1x2x3", "32", "1x", "ax1"):
        with pytest.raises(ValueError):
            points(malformed)


def served(p50_ms: float, **cpu_ms: float) -> dict:
    return {"p50_ms": p50_ms, "cpu_ms_per_request_by_part": cpu_ms}


def test_hop_summary_locates_the_time_by_differences_of_medians():
    """Each layer's share is a difference of the servers' medians over the rounds, not of one round's figures."""
    runs = {
        "textbento": [served(9.0, API=2.0, Encoder=4.0), served(12.0, API=2.0, Encoder=6.0), served(10.0, API=2.0, Encoder=5.0)],
        SOLO: [served(1.5, API=1.0), served(1.5, API=1.0), served(1.6, API=1.2)],
        HOP: [served(4.0, API=1.5, Encoder=2.5), served(4.5, API=1.5, Encoder=3.0), served(4.0, API=1.5, Encoder=2.5)],
        MOUNTED: [served(3.8, API=1.5, Encoder=2.5), served(4.0, API=1.5, Encoder=2.5), served(4.4, API=1.5, Encoder=2.5)],
        "model alone": [{"alone_pass_ms": 6.0}, {"alone_pass_ms": 6.5}, {"alone_pass_ms": 5.0}],
        "bare round trip": [{"round_trip_ms": 0.05}, {"round_trip_ms": 0.07}, {"round_trip_ms": 0.06}],
    }
    result = summary(runs)
    assert result["p50_ms"] == {"textbento": 10.0, SOLO: 1.5, HOP: 4.0, MOUNTED: 4.0}
    assert result["lone_pass_ms"] == 6.0 and result["bare_round_trip_ms"] == 0.06
    shares = result["where_the_time_goes_ms"]
    assert shares["BentoML's hop and batcher, over one process"] == 2.5
    assert shares["textbento over its lone pass"] == 4.0
    assert shares["textbento over its lone pass and BentoML's one-process floor"] == 2.5
    assert result["cpu_ms_per_call_of_the_hop"] == 3.0  # HOP's 1.5 + 2.5 against SOLO's 1.0


def test_a_bare_round_trip_between_two_processes_is_measured():
    """The echo server answers each framed request; a round trip takes more than nothing and far less than a pass."""
    assert 0 < bare_round_trip_ms(calls=200) < 20


def test_every_stage_of_the_timeline_names_a_function_of_the_code_as_it_is():
    for module, function, stage, _ in timeline.STAGES:
        holder, attribute = timeline.resolve(importlib.import_module(module), function)
        assert callable(inspect.getattr_static(holder, attribute)), stage


def test_the_timeline_stamps_calls_and_returns_and_orders_stages_by_when_they_happen(tmp_path):
    stamps = []

    def stamp(stage: str) -> None:
        stamps.append(stage)

    async def answer(cycle, message):
        stamps.append("answering")

    def work(value):
        stamps.append("working")
        return value

    assert timeline.stamped(work, "done", True, stamp)(3) == 3 and stamps == ["working", "done"]
    asyncio.run(timeline.stamped(answer, "API worker: answer sent", False, stamp)(None, {"type": "http.response.start"}))
    assert stamps[2:] == ["API worker: answer sent (http.response.start)", "answering"]
    # two requests, sent at 10 and 20 s; a stray stamp between them belongs to neither
    (tmp_path / "1.tsv").write_text("10.001\tfirst\n10.003\tsecond\n15\tstray\n20.002\tfirst\n20.003\tsecond\n")
    found = timeline.stages(tmp_path, [(10.0, 10.004), (20.0, 20.005)])
    assert list(found) == ["first", "second", timeline.READ]
    assert found["first"]["at_ms"] == 1.5 and found["second"]["since_previous_ms"] == 1.5 and found["second"]["requests"] == 2
