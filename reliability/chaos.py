"""Chaos soak: mixed traffic at c=64 while the Encoder and the API workers are SIGKILLed on a schedule.

    python -m reliability.chaos [--minutes 30] [--encoder-every 120] [--worker-every 180] [--model TAG]
    python -m reliability.chaos --models TAG,TAG,... --out bench/results/chaos-several.json

Writes ``bench/results/chaos.json`` (per kill: when, which process, its replacement's start, the
throughput before and when it came back; statuses; RSS samples) and exits 1 when a check fails.
With ``--models`` the models are served together (``TEXTBENTO_MODELS``): the c=64 is split among
them, each request naming its model in its route's shape (``reliability.soak.mixed_body``), and the
Encoder kills take each model's Encoder in turn. The checks:

- every answer is 200, 429, or 503 with ``Retry-After``; a 503 only within ``GRACE_S`` of a kill;
- a dropped connection only within ``GRACE_S`` of an API worker's kill (the requests on that
  process's own connections: no process is left to answer them);
- no request takes longer than the service's timeout + 5 s;
- after each kill, throughput (3 s rolling; an Encoder's kill: its model's) is back to 80% of the
  30 s before it (or of the run's median rate, when that is lower) within ``RECOVERY_S`` of the
  replacement starting (the "Service ... initialized" line in the log);
- several models: while one model's Encoder is down (``GRACE_S`` from its kill), every other model's
  requests are all answered 200, and some are;
- total RSS at the end within 10% of its level after the first kill's recovery;
- once the traffic has ended, ``textbento_inflight_requests`` reads 0 (a killed worker's requests
  in flight do not stay counted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import re
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import psutil
import requests
from prometheus_client.parser import text_string_to_metric_families

from harness.load import closed_loop
from harness.results import RESULTS, write_result
from harness.serving import serve, service_processes
from harness.texts import short_texts
from reliability.soak import ROUTES, mixed_body
from serving.settings import settings

GRACE_S = 10
RECOVERY_S = 5
CONCURRENCY = 64
API_SERVICE = "textbento"


def encoder_services(tags: list[str]) -> dict[str, str]:
    """Each served model's name and its Encoder's service name (as ``serving.wiring.encoder_service`` names it)."""
    names = [tag.partition(":")[0] for tag in tags]
    return {name: "encoder" if len(names) == 1 else f"encoder-{name}" for name in names}


def task_of(card: dict) -> str:
    """The route a served model answers, from its /v1/models card (a one-label classifier reranks)."""
    return "rerank" if card["task"] == "classify" and len(card["labels"]) == 1 else card["task"]


def schedule(seconds: float, encoder_every: float, worker_every: float) -> list[tuple[float, str]]:
    kills = [(t, "encoder") for t in range(int(encoder_every), int(seconds - 30), int(encoder_every))]
    kills += [(t, "API worker") for t in range(int(worker_every), int(seconds - 30), int(worker_every))]
    # Never two kills in the same minute: each recovery is measured on its own. A kill is put off to
    # 45 s after the last one kept (not after its own time: that let two land together), and one put
    # off past the last 30 s is dropped (no time left to see it recover).
    kept: list[tuple[float, str]] = []
    for at, what in sorted(kills):
        at = max(at, kept[-1][0] + 45) if kept else at
        if at <= seconds - 30:
            kept.append((at, what))
    return kept


def initialized_times(log: Path, service: str) -> list[float]:
    """Wall-clock times of the log's 'Service <service> initialized' lines (1 s resolution)."""
    pattern = re.compile(rf"^(\S+) \[INFO\] \[\S*service:{service}:\d+\] Service {service} initialized")
    return [datetime.fromisoformat(m.group(1)).timestamp() for line in log.read_text().splitlines() if (m := pattern.match(line))]


def run(models: str | list[str], seconds: float, plan: list[tuple[float, str]], log: Path) -> dict:
    """Serves ``models`` (one tag, or several served together) and loads them for ``seconds`` while
    killing (at, what) as ``plan`` says; the Encoder kills go to each model's Encoder in turn."""
    tags = [models] if isinstance(models, str) else models
    encoders = encoder_services(tags)
    env = {"TEXTBENTO_MODEL": tags[0]} if len(tags) == 1 else {"TEXTBENTO_MODELS": ",".join(tags)}
    kills: list[dict] = []
    rss: list[tuple[float, float]] = []
    with serve(env=env, log_path=log) as server:
        texts = short_texts(2048)
        if len(tags) == 1:  # as before: unnamed requests to /v1/embeddings
            bodies = {name: ("/v1/embeddings", mixed_body(texts)) for name in encoders}
        else:
            cards = requests.get(f"{server.url}/v1/models", timeout=30).json()["data"]
            bodies = {card["id"]: (ROUTES[task_of(card)], mixed_body(texts, task_of(card), card["id"])) for card in cards}
        stop = threading.Event()
        started = time.monotonic()
        wall_started = time.time()

        def chaos() -> None:
            next_encoder = itertools.cycle(encoders)
            for at, what in plan:
                if stop.wait(max(0.0, at - (time.monotonic() - started))):
                    return
                model = next(next_encoder) if what == "encoder" else None
                service = encoders[model] if model else API_SERVICE
                victim = service_processes(server.process, service)[0]
                kills.append(
                    {"at_s": round(time.monotonic() - started, 2), "what": what, "model": model, "service": service, "pid": victim.pid}
                )
                victim.send_signal(signal.SIGKILL)
                print(f"{kills[-1]['at_s']:7.1f} s  killed the {' '.join(filter(None, (what, model)))} (pid {victim.pid})", flush=True)

        def sample() -> None:
            while not stop.wait(5):
                with contextlib.suppress(psutil.Error):  # a process vanished while being read: the next sample counts
                    rss.append((round(time.monotonic() - started, 1), round(server.rss_mib(), 1)))

        threads = [threading.Thread(target=chaos), threading.Thread(target=sample)]
        for thread in threads:
            thread.start()

        async def load() -> list:
            # Started together, within milliseconds: their timelines share the run's clock.
            loops = [
                closed_loop(
                    server.url + route,
                    body,
                    concurrency=CONCURRENCY // len(bodies),
                    requests=10**9,
                    deadline_s=seconds,
                    timeline=True,
                    timeout_s=settings.timeout_s + 30,
                )
                for route, body in bodies.values()
            ]
            return await asyncio.gather(*loops)

        results = dict(zip(bodies, asyncio.run(load())))
        stop.set()
        for thread in threads:
            thread.join()
        inflight = in_flight(server.url)
    for kill in kills:
        restarts = [t - wall_started for t in initialized_times(log, kill["service"]) if t - wall_started > kill["at_s"] - 1]
        kill["replacement_started_s"] = round(restarts[0], 1) if restarts else None
    return {"results": results, "kills": kills, "rss": rss, "inflight_after": inflight}


def in_flight(url: str) -> float:
    """``textbento_inflight_requests`` as /metrics reports it (summed over the live workers)."""
    families = text_string_to_metric_families(requests.get(f"{url}/metrics", timeout=10).text)
    return sum(s.value for family in families if family.name == "textbento_inflight_requests" for s in family.samples)


def throughput(timeline: list, seconds: float) -> list[int]:
    """Answers completed in each second of the run."""
    per_second = [0] * (int(seconds) + 120)
    for sent, latency, _, _ in timeline:
        per_second[min(int(sent + latency), len(per_second) - 1)] += 1
    return per_second


def spared(kill: dict, results: dict) -> list[str]:
    """Failures of the models other than ``kill``'s: within ``GRACE_S`` of their neighbour's Encoder
    kill, each must have had every request answered 200, and at least one; their statuses go on ``kill``."""
    failures, kill["others"] = [], {}
    for name, result in results.items():
        if name == kill["model"]:
            continue
        statuses = Counter(status for sent, latency, status, _ in result.timeline if -1 <= sent + latency - kill["at_s"] <= GRACE_S)
        kill["others"][name] = {str(status): count for status, count in statuses.items()}
        if set(statuses) != {200}:
            failures.append(f"{name} got {kill['others'][name]} while {kill['model']}'s Encoder was down ({kill['at_s']} s)")
    return failures


def judge(run_: dict, seconds: float) -> dict:
    results, kills = run_["results"], run_["kills"]
    timeline = [entry for result in results.values() for entry in result.timeline]
    statuses_seen = sum((result.statuses for result in results.values()), Counter())
    per_second = throughput(timeline, seconds)
    per_model_second = {name: throughput(result.timeline, seconds) for name, result in results.items()}
    kill_times = [k["at_s"] for k in kills]
    worker_kills = [k["at_s"] for k in kills if k["what"] == "API worker"]

    def near(ended: float, times: list[float]) -> bool:
        return any(-1 <= ended - t <= GRACE_S for t in times)

    failures: list[str] = []
    dropped = 0
    for sent, latency, status, retry_after in timeline:
        ended = sent + latency
        if status == 200 or (status == 429 and retry_after):
            continue
        if status == 503 and retry_after and near(ended, kill_times):
            continue
        if isinstance(status, str) and status != "TimeoutError" and near(ended, worker_kills):
            dropped += 1
            continue
        failures.append(f"{status} at {ended:.1f} s (Retry-After: {retry_after})")
    slowest = max(latency for _, latency, _, _ in timeline)
    if slowest > settings.timeout_s + 5:
        failures.append(f"a request took {slowest:.1f} s (timeout {settings.timeout_s} s)")
    for kill in kills:
        at = int(kill["at_s"])
        # An Encoder's kill stops its own model only: its recovery is read on that model's answers.
        answered = per_model_second[kill["model"]] if kill["what"] == "encoder" else per_second
        usual = statistics.median(answered[30 : int(seconds)])
        before = statistics.median(answered[max(0, at - 30) : at - 1])
        # The load's own rate swings ±20% between 30 s windows (two 30-minute runs: coefficient of
        # variation 0.18 and 0.20), so a kill in a fast phase is held to the run's usual rate.
        level = min(before, usual)
        rolling = [sum(answered[t : t + 3]) / 3 for t in range(at, len(answered) - 3)]
        back = next((at + i for i, rate in enumerate(rolling) if rate >= 0.8 * level), None)
        kill.update(throughput_before=before, throughput_usual=usual, back_at_s=back)
        restarted = kill["replacement_started_s"]
        if restarted is None or back is None:
            failures.append(f"{kill['what']} killed at {at} s: not replaced or throughput never back")
        else:
            kill["back_after_replacement_s"] = round(back - restarted, 1)
            if back - restarted > RECOVERY_S + 1:  # + 1: the log's timestamps have 1 s resolution
                failures.append(f"{kill['what']} killed at {at} s: throughput back {back - restarted:.1f} s after its replacement started")
        if kill["what"] == "encoder" and len(results) > 1:
            failures += spared(kill, results)
    rss = run_["rss"]
    settled = kills[0]["back_at_s"] + 30 if kills and kills[0].get("back_at_s") else seconds * 0.2
    baseline = max((mib for t, mib in rss if t <= settled), default=None)
    end = max((mib for t, mib in rss if t >= seconds * 0.8), default=None)
    growth = end / baseline - 1 if baseline and end else None
    if growth is None or growth > 0.10:
        failures.append(f"RSS grew {growth}")
    if run_["inflight_after"] != 0:
        failures.append(f"textbento_inflight_requests reads {run_['inflight_after']} after the traffic ended")
    statuses = {str(k): v for k, v in sorted(statuses_seen.items(), key=str)}
    by_model = {
        name: {
            "statuses": {str(k): v for k, v in sorted(result.statuses.items(), key=str)},
            "answers_per_s": round(result.statuses.get(200, 0) / seconds, 1),
            "per_second": per_model_second[name][: int(seconds) + 5],
        }
        for name, result in results.items()
    }
    return {
        "passed": not failures,
        "failures": failures[:50],
        "requests": sum(statuses_seen.values()),
        "statuses": statuses,
        "dropped_connections_at_worker_kills": dropped,
        "slowest_s": round(slowest, 2),
        "answers_per_s": round(sum(1 for entry in timeline if entry[2] == 200) / seconds, 1),
        "kills": kills,
        "rss_growth": None if growth is None else round(growth, 4),
        "inflight_after": run_["inflight_after"],
        "rss_mib": rss,
        "per_second": per_second[: int(seconds) + 5],
        **({"models": by_model} if len(results) > 1 else {}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--encoder-every", type=float, default=120)
    parser.add_argument("--worker-every", type=float, default=180)
    parser.add_argument("--model", default="text-model:latest")
    parser.add_argument("--models", default="", help="comma-separated tags served together (TEXTBENTO_MODELS); overrides --model")
    parser.add_argument("--out", default=str(RESULTS / "chaos.json"))
    args = parser.parse_args(argv)
    seconds = args.minutes * 60
    log = Path(tempfile.mkdtemp(prefix="textbento-chaos-")) / "server.log"
    plan = schedule(seconds, args.encoder_every, args.worker_every)
    models = [tag.strip() for tag in args.models.split(",") if tag.strip()] or args.model
    verdict = judge(run(models, seconds, plan, log), seconds)
    verdict = {"command": "python -m reliability.chaos " + " ".join(argv if argv is not None else sys.argv[1:]), **vars(args), **verdict}
    write_result(args.out, verdict, indent=1)
    summary = {k: verdict[k] for k in ("passed", "requests", "statuses", "dropped_connections_at_worker_kills", "slowest_s", "rss_growth")}
    print(json.dumps(summary))
    for kill in verdict["kills"]:
        print(
            f"  {kill['what']} {kill['model'] or ''} killed at {kill['at_s']} s: replaced at {kill['replacement_started_s']} s, "
            f"throughput {kill.get('throughput_before')} /s back at {kill.get('back_at_s')} s; others {kill.get('others', '-')}"
        )
    for failure in verdict["failures"]:
        print("FAIL:", failure)
    return 0 if verdict["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
