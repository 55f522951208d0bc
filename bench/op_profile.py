"""Where a pass goes, by operator: ONNX Runtime's profiler on the stored fp32 and int8 graphs, in process.

    python -m bench.op_profile     # → bench/results/op-profile.json (--output names another)

The benchmark model's graphs (``bench.ceiling``), each on one single-threaded session with the served
session options (one stream's session, docs/design.md section 9), over the stream of short texts sorted
by length and cut into batches of 32 (``sorted-32``). The int8 graph runs with the weights this CPU's
kernels get (``models.cpu``: u8×s8, else rewritten as u8×u8). Each operator type's share of the kernels'
time, over ``--rounds`` passes over the stream (the first pass's first batch warms the session up).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import bentoml
import onnxruntime as ort

from bench.ceiling import batches, bench_tag, loaded
from harness.results import write_result
from models.backends.onnx_backend import session_options
from models.batching import pad
from models.cpu import signed_int8_is_exact
from models.onnx_layout import FP32, INT8, onnx_dir


def session(graph: Path, profile: bool) -> ort.InferenceSession:
    options = session_options(1)
    options.enable_profiling = profile
    if graph.name == INT8 and not signed_int8_is_exact():
        import onnx

        from models.quantize import unsigned_weights

        rewritten = unsigned_weights(onnx.load(str(graph))).SerializeToString()
        return ort.InferenceSession(rewritten, options, providers=["CPUExecutionProvider"])
    return ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])


def profile(graph: Path, groups: list, pad_id: int, rounds: int) -> dict:
    """Each operator type's share of the kernels' time (%), and the kernels' ms per text."""
    feeds = []
    profiled = session(graph, profile=True)  # its profile file lands in the working directory; removed below
    names = {one.name for one in profiled.get_inputs()}
    for group in groups:
        input_ids, attention_mask = pad(group, pad_id)
        feed = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": input_ids * 0}
        feeds.append({name: value for name, value in feed.items() if name in names})
    for _ in range(rounds):
        for feed in feeds:
            profiled.run(None, feed)
    written = Path(profiled.end_profiling())
    events = json.loads(written.read_text())
    written.unlink()
    by_op: Counter[str] = Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_op[event["args"]["op_name"]] += event["dur"]
    total = sum(by_op.values())
    texts = rounds * sum(len(group) for group in groups)
    return {
        "kernel_ms_per_text": round(total / 1000 / texts, 4),
        "share_percent": {op: round(100 * microseconds / total, 1) for op, microseconds in by_op.most_common()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", default="op-profile.json")
    args = parser.parse_args()
    tag = bench_tag()
    _, spec, ids = loaded("onnx", tag)
    groups = batches(ids, "sorted-32")
    directory = onnx_dir(Path(bentoml.models.get(tag).path))
    graphs = {"fp32": FP32, "int8": INT8}
    rows = {name: profile(directory / file, groups, spec.pad_id, args.rounds) for name, file in graphs.items()}
    rows["int8"]["kernels"] = "u8×s8" if signed_int8_is_exact() else "u8×u8"
    for name, row in rows.items():
        print(name, row["kernel_ms_per_text"], "ms a text:", list(row["share_percent"].items())[:12])
    write_result(args.output, {"batches": "sorted-32", "threads": 1, "rounds": args.rounds, "graphs": rows})


if __name__ == "__main__":
    main()
