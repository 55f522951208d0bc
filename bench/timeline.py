"""Where a lone request's time goes, stage by stage, in the processes of a served textbento.

    python -m bench.timeline      # → bench/results/timeline.json (~1 min)

Serves this tree (``make serve``'s defaults, the benchmark model) with each of its processes stamping the wall clock
as a request passes each of ``STAGES`` (functions wrapped at import, by ``bench/stamps/sitecustomize.py``: the
code itself is unchanged), and sends it ``--requests`` one-text requests one at a time. Each stage's figure is
the median over the requests of its time since the client sent the request, and since the stage before: the
stages in the order they happen, the client's send and read around them. A stamp costs a few microseconds; the
steps between stages, not the totals, are what this is for (``bench.hop`` has the floors, ``bench.peers`` the
latency as measured without stamps).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import functools
import importlib
import importlib.abc
import inspect
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.results import write_result
from harness.serving import ROOT, serve
from harness.texts import short_texts

HTTP = "uvicorn.protocols.http.httptools_impl"
# (module, function or Class.method, stage, stamped on return rather than on call), in the order a request passes them.
# uvicorn's are stamped in the Encoder too where it answers HTTP (its probes): rare inside a request's window, and the
# figures are medians.
STAGES = [
    (HTTP, "HttpToolsProtocol.data_received", "API worker: request bytes in", False),
    ("api.middleware", "CancelWhenGone.__call__", "API worker: past BentoML's and FastAPI's middlewares", False),
    ("api.pipeline", "Pipeline.run", "API worker: the route's pipeline", False),
    ("api.pipeline", "tokenize", "API worker: tokenized", True),
    ("serving.socket_hop", "SocketCalls.__call__", "API worker: call to the Encoder", False),
    ("serving.socket_hop", "Answering.data_received", "Encoder: call read", False),
    ("serving.socket_hop", "Answering.respond", "Encoder: call's task", False),
    ("models.engine", "Engine.run", "Encoder: to the inference thread", False),
    ("models.engine", "Engine.forward", "Encoder: on the inference thread", False),
    ("models.backends.onnx_backend", "OnnxBackend.forward", "Encoder: pass starts", False),
    ("models.backends.onnx_backend", "OnnxBackend.forward", "Encoder: pass ends", True),
    ("models.engine", "Engine.run", "Encoder: back on the event loop", True),
    ("serving.socket_hop", "Answering.respond", "Encoder: answer written", True),
    ("serving.socket_hop", "read_frame", "API worker: answer read", True),
    ("api.pipeline", "Pipeline.timed", "API worker: answer made", False),
    (HTTP, "RequestResponseCycle.send", "API worker: answer sent", False),
]
BY_MESSAGE = {"API worker: answer sent"}  # stamped per ASGI message: its start, then its body
SENT, READ = "client: request sent", "client: answer read"


def resolve(module: object, name: str) -> tuple[object, str]:
    """The object holding ``name`` (``Class.method``: the class) and the attribute's own name."""
    *path, attribute = name.split(".")
    return functools.reduce(getattr, path, module), attribute


def stamped(function, stage: str, on_return: bool, stamp):
    """``function`` (sync or async) stamping ``stage`` as it is called or as it returns (an ASGI send's: by message)."""

    def name(args: tuple) -> str:
        return f"{stage} ({args[1]['type']})" if stage in BY_MESSAGE else stage

    if inspect.iscoroutinefunction(function):

        async def wrapper(*args, **kwargs):
            if not on_return:
                stamp(name(args))
            result = await function(*args, **kwargs)
            if on_return:
                stamp(name(args))
            return result
    else:

        def wrapper(*args, **kwargs):
            if not on_return:
                stamp(name(args))
            result = function(*args, **kwargs)
            if on_return:
                stamp(name(args))
            return result

    return functools.wraps(function)(wrapper)


def wrap(module: object, stamp) -> None:
    """Every stage of ``module`` stamped (a missing one fails the server's start: the stages name the code as it is)."""
    for module_name, function, stage, on_return in STAGES:
        if module_name == module.__name__:
            holder, attribute = resolve(module, function)
            setattr(holder, attribute, stamped(inspect.getattr_static(holder, attribute), stage, on_return, stamp))


class Stamping(importlib.abc.MetaPathFinder):
    """Wraps the stages of each module of ``STAGES`` as it is imported."""

    def __init__(self, stamp) -> None:
        self.stamp, self.modules = stamp, {module for module, *_ in STAGES}

    def find_spec(self, name, path, target=None):
        if name not in self.modules:
            return None
        others = (finder for finder in sys.meta_path if finder is not self and hasattr(finder, "find_spec"))
        spec = next((found for finder in others if (found := finder.find_spec(name, path, target)) is not None), None)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module) -> None:
            execute(module)
            wrap(module, self.stamp)

        spec.loader.exec_module = exec_module
        return spec


def install(folder: str) -> None:
    """This process stamps its stages into a file of its own in ``folder`` (its wall clock, then the stage, a line each)."""
    out = open(Path(folder) / f"{os.getpid()}.tsv", "a", buffering=1)  # noqa: SIM115 - the process's own, until it exits

    def stamp(stage: str) -> None:
        out.write(f"{time.time():.6f}\t{stage}\n")

    sys.meta_path.insert(0, Stamping(stamp))


async def requests_one_at_a_time(url: str, count: int) -> list[tuple[float, float]]:
    """Each request's send and answer (wall clock), one text each, one at a time."""
    import aiohttp

    texts = short_texts(512)
    spans = []
    async with aiohttp.ClientSession() as session:
        for i in range(count):
            sent = time.time()
            async with session.post(f"{url}/v1/embeddings", json={"input": [texts[i % len(texts)]]}) as answer:
                await answer.read()
                answer.raise_for_status()
            spans.append((sent, time.time()))
    return spans


def stages(folder: Path, spans: list[tuple[float, float]]) -> dict[str, dict[str, float]]:
    """Per stage, in the order they happen: the medians of its time since the request was sent and since the stage before."""
    lines = (line.split("\t") for path in folder.glob("*.tsv") for line in path.read_text().splitlines())
    stamps = sorted((float(at), stage) for at, stage in lines)
    times = [at for at, _ in stamps]
    since_sent: dict[str, list[float]] = {}
    since_before: dict[str, list[float]] = {}
    for sent, read in spans:
        passed = [(sent, SENT), *stamps[bisect.bisect_left(times, sent) : bisect.bisect_right(times, read)], (read, READ)]
        for (before, _), (at, stage) in zip(passed, passed[1:]):
            since_sent.setdefault(stage, []).append(at - sent)
            since_before.setdefault(stage, []).append(at - before)
    order = sorted(since_sent, key=lambda stage: statistics.median(since_sent[stage]))
    return {
        stage: {
            "at_ms": round(1000 * statistics.median(since_sent[stage]), 3),
            "since_previous_ms": round(1000 * statistics.median(since_before[stage]), 3),
            "requests": len(since_sent[stage]),
        }
        for stage in order
    }


def main(count: int, warm_up: int, output: str) -> None:
    from bench.ceiling import bench_tag

    tag = bench_tag()
    with tempfile.TemporaryDirectory(prefix="textbento-stamps-") as folder:
        path = os.pathsep.join(filter(None, [str(ROOT / "bench" / "stamps"), os.environ.get("PYTHONPATH")]))
        with serve(env={"TEXTBENTO_MODEL": tag, "TEXTBENTO_STAMPS": folder, "PYTHONPATH": path}) as server:
            asyncio.run(requests_one_at_a_time(server.url, warm_up))
            spans = asyncio.run(requests_one_at_a_time(server.url, count))
        found = stages(Path(folder), spans)
    if not any(stage.startswith("Encoder") for stage in found):
        raise RuntimeError("no stage of the Encoder was stamped: were the stages' functions renamed?")
    report = {"model": tag, "requests": count, "concurrency": 1, "texts_per_request": 1, "stages": found}
    print(write_result(output, report))
    for stage, figures in found.items():
        print(f"{figures['at_ms']:8.3f} ms  +{figures['since_previous_ms']:6.3f}  {stage}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--warm-up", type=int, default=200)
    parser.add_argument("--output", default="timeline.json")
    arguments = parser.parse_args()
    main(arguments.requests, arguments.warm_up, arguments.output)
