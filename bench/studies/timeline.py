"""Where a lone request's time goes: wall-clock milliseconds per stage at 1 text/request, c=1.

    python -m bench.studies.timeline [--requests 600]    → bench/results/timeline-1x-c1.json
    python -m bench.studies.timeline --against REF --rounds 2    → bench/results/timeline-1x-c1-against-REF.json

``bench.studies.profile`` charges CPU to kinds of work; at c=1 what the client waits for is the
wall clock along one request's path, across three processes. This serves the default model
(``bench.ceiling.bench_tag``) as it is, with a ``sitecustomize`` on the server's ``PYTHONPATH``
(``STAMPS``) that stamps ``time.time()`` at each stage boundary in every server process: uvicorn's
request in and answer sent, the route's pipeline, the tokenizer, the hop's call, BentoML's batcher,
the Encoder's ``encode`` and forward passes, the answer. Requests go one at a time with a pause
between them, so that each one's stamps sort into a run of their own; each stamp's median offset
from the client's send, and the stages between them, in order. With ``--against REF``, ``REF``
(checked out in a scratch worktree) is served in turns with this tree, on the same stored model,
and the stages of both are written: a change's cost or gain at the stage it touches, which the
machine's noise hides end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

from bench import write_result
from bench.ceiling import bench_tag
from bench.compare import worktree
from bench.peers import SERVED_NAME
from harness.serving import ROOT, serve
from harness.texts import short_texts

# Wraps functions as their modules load, in every server process; writes "role: stage time" lines.
STAMPS = r"""
import functools, importlib.abc, importlib.util, inspect, os, sys, time

_command = open("/proc/self/cmdline", "rb").read().replace(b"\0", b" ").decode()
_role = "Encoder" if "--service-name encoder" in _command else "API worker"
_log = open(os.path.join(os.environ["TEXTBENTO_TIMELINE"], f"{os.getpid()}.log"), "a", buffering=1)


def stamp(stage):
    _log.write(f"{_role}: {stage}\t{time.time():.6f}\n")


def around(function, before=None, after=None):
    if inspect.iscoroutinefunction(function):
        async def wrapped(*args, **kwargs):
            before and stamp(before)
            result = await function(*args, **kwargs)
            after and stamp(after)
            return result
    else:
        def wrapped(*args, **kwargs):
            before and stamp(before)
            result = function(*args, **kwargs)
            after and stamp(after)
            return result
    return functools.wraps(function)(wrapped)


def timed_hop(make):
    def made(call, attempts):
        return around(make(call, attempts), "call to the Encoder sent", "call to the Encoder answered")
    return made


def run_asgi(original):
    async def run(self, app):
        if self.scope.get("path") in ("/readyz", "/livez", "/metrics"):
            return await original(self, app)
        stamp("HTTP request in")
        await original(self, app)
        stamp("HTTP answer sent")
    return run


def uvicorn_cycle(module):
    module.RequestResponseCycle.run_asgi = run_asgi(module.RequestResponseCycle.run_asgi)


PATCHES = {
    "uvicorn.protocols.http.httptools_impl": uvicorn_cycle,
    "uvicorn.protocols.http.h11_impl": uvicorn_cycle,
    "api.pipeline": lambda m: setattr(m.Pipeline, "run", around(m.Pipeline.run, "route's pipeline")),
    "models.tokenization": lambda m: setattr(m.TextTokenizer, "encode", around(m.TextTokenizer.encode, None, "tokenized")),
    "serving.hop": lambda m: setattr(m, "resend_unanswered", timed_hop(m.resend_unanswered)),
    "bentoml._internal.marshal.dispatcher": lambda m: setattr(
        m.CorkDispatcher, "inbound_call", around(m.CorkDispatcher.inbound_call, "queued in BentoML's batcher")
    ),
    "serving.wire": lambda m: (
        setattr(m, "ids_from_wire", around(m.ids_from_wire, "encode called")),
        setattr(m, "rows_to_wire", around(m.rows_to_wire, None, "encode returns")),
    ),
    "models.inference": lambda m: setattr(m, "run_passes", around(m.run_passes, "forward passes start", "forward passes end")),
    "serving.telemetry": lambda m: setattr(m.Timing, "headers", around(m.Timing.headers, "answer made")),
}


class Patcher(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, Patcher())
"""


async def one_at_a_time(url: str, texts: list[str], count: int) -> list[tuple[float, float]]:
    """``count`` requests of one text each, one at a time: when each was sent and answered."""
    sent = []
    async with aiohttp.ClientSession() as session:
        for index in range(count):
            started = time.time()
            async with session.post(url, json={"model": SERVED_NAME, "input": [texts[index % len(texts)]]}) as response:
                await response.read()
                response.raise_for_status()
            sent.append((started, time.time()))
            await asyncio.sleep(0.002)  # the stamps of consecutive requests stay apart
    return sent


def stages(stamps: list[tuple[str, float]], sent: list[tuple[float, float]]) -> dict[str, float]:
    """Each stamp's median offset from its request's send, in milliseconds, in the order they come."""
    offsets: dict[str, list[float]] = {}
    stamps.sort(key=lambda item: item[1])
    position = 0
    for started, answered in sent:
        while position < len(stamps) and stamps[position][1] < started:
            position += 1
        seen = {}
        while position < len(stamps) and stamps[position][1] <= answered:
            seen.setdefault(*stamps[position])
            position += 1
        for name, when in {**seen, "client: answer read": answered}.items():
            offsets.setdefault(name, []).append((when - started) * 1000)
    medians = {name: statistics.median(values) for name, values in offsets.items() if len(values) > len(sent) // 2}
    return dict(sorted(medians.items(), key=lambda item: item[1]))


def lone_passes_ms(texts: list[str], pauses_s: tuple[float, ...], rounds: int = 3) -> dict[str, float]:
    """In this process, the served backend's median forward pass of one text, each after a pause
    of each of ``pauses_s`` idle, the pauses in turns."""
    import bentoml

    from models.backends import load_backend
    from models.spec import ModelSpec
    from models.tokenization import TextTokenizer
    from serving.settings import settings

    stored = bentoml.models.get(bench_tag())
    spec = ModelSpec.of(stored)
    backend = load_backend(settings.backend, stored.path, spec, settings.runner_threads)
    encoded = TextTokenizer(stored.path, spec.max_length).encode(texts)
    batches = [(e.ids[None].astype("int64"), np.ones((1, len(e.ids)), dtype=np.int64)) for e in encoded]
    for input_ids, mask in batches[:50]:
        backend.forward(input_ids, mask)
    took: dict[float, list[float]] = {pause: [] for pause in pauses_s}
    for _ in range(rounds):
        for pause in pauses_s:
            for input_ids, mask in batches:
                time.sleep(pause)
                started = time.perf_counter()
                backend.forward(input_ids, mask)
                took[pause].append((time.perf_counter() - started) * 1000)
    return {f"after {pause * 1000:g} ms idle": round(statistics.median(values), 3) for pause, values in took.items()}


def served_stages(tree: Path, texts: list[str], requests: int) -> dict[str, float]:
    """``stages`` of ``tree`` serving the benchmark model, its processes stamped."""
    with tempfile.TemporaryDirectory(prefix="textbento-timeline-") as scratch:
        Path(scratch, "sitecustomize.py").write_text(STAMPS)
        logs = Path(scratch, "stamps")
        logs.mkdir()
        env = {"TEXTBENTO_MODEL": bench_tag(), "PYTHONPATH": scratch, "TEXTBENTO_TIMELINE": str(logs)}
        with serve(env=env, cwd=tree) as server:
            url = server.url + "/v1/embeddings"
            asyncio.run(one_at_a_time(url, texts, 100))  # warm-up
            sent = asyncio.run(one_at_a_time(url, texts, requests))
        stamps = [(name, float(when)) for log in logs.iterdir() for name, when in (line.rsplit("\t", 1) for line in log.open())]
    return stages(stamps, sent)


def steps_of(rounds: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each stamp's median offset over the rounds, and the stage before it."""
    names = [name for name in rounds[0] if all(name in offsets for offsets in rounds)]
    previous, steps = 0.0, {}
    for name in names:
        offset = statistics.median(offsets[name] for offsets in rounds)
        steps[name] = {"at_ms": round(offset, 3), "since_previous_ms": round(offset - previous, 3)}
        previous = offset
    return steps


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--against", help="a git revision served in turns with this tree, e.g. the last landed commit")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    texts = short_texts(2048)
    with worktree(args.against) if args.against else contextlib.nullcontext() as other:
        trees = {"this tree": ROOT, **({args.against: other} if other else {})}
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                rounds[name].append(served_stages(tree, texts, args.requests))
    # The same passes in this process, back to back and after the pause a served request leaves between
    # them: how much of the passes' stage is the cores waking from idle rather than the model.
    alone = lone_passes_ms(texts[:300], (0.0, 0.004))
    served = {name: steps_of(offsets) for name, offsets in rounds.items()}
    report = {
        "model": bench_tag(),
        "requests": args.requests,
        "rounds": args.rounds,
        "texts_per_request": 1,
        "concurrency": 1,
        "stages": served["this tree"],
        **({"stages_of_" + args.against: served[args.against]} if args.against else {}),
        "in_process_forward_pass_ms": alone,
    }
    for name, step in served["this tree"].items():
        theirs = served[args.against][name]["since_previous_ms"] if args.against else None
        print(f"{name:50s} {step['at_ms']:8.3f} {step['since_previous_ms']:+8.3f}" + (f" ({theirs:+.3f})" if args.against else ""))
    print("in process, one text's forward pass:", alone)
    print(write_result(f"timeline-1x-c1-against-{args.against}.json" if args.against else "timeline-1x-c1.json", report))


if __name__ == "__main__":
    main()
