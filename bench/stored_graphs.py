"""Stored models' served graphs side by side, in process: which runs faster here, to within a percent or two?

    python -m bench.stored_graphs bench-minilm-onnx:AAA bench-minilm-onnx:BBB --output stored-graphs.json

For a change to the export or the int8 rewrite: import the model with each tree (``python -m
train_import.import_model --name ...``), then compare what each stored. Each model is loaded as ``auto``'s
backend of the same name would be (``--backend``, ``onnx-int8`` by default: its streams and sessions), and
run on the same texts in turns, ``--reps`` times, the order reversed every other turn: lone texts (``alone``) and
the stream of short texts sorted by length in batches of 32 (``sorted-32``, ``bench.ceiling``). Each batch
keeps its fastest pass of all the turns, and the figures are their sums: on a shared machine interference only
ever adds time, so the minima agree between two loads of one graph to a percent or two where a best or
median turn of whole passes over the stream can differ by ten.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import bentoml

from bench.ceiling import batches, loaded
from harness.results import write_result
from models.inference import run_batch
from serving.settings import settings

LONE_TEXTS, STREAM_TEXTS = 120, 1024


def labels(tags: list[str]) -> list[str]:
    """Each tag, numbered from its second time on: one graph named several times is loaded that often, each its
    own sessions, which measures the measure's own spread."""
    return [tag if tags[:i].count(tag) == 0 else f"{tag} ({tags[:i].count(tag) + 1})" for i, tag in enumerate(tags)]


def fastest_passes(tags: list[str], backend: str, reps: int) -> dict[str, dict[str, float]]:
    """Per tag: a lone text's pass (ms, mean over ``LONE_TEXTS``) and texts/s in sorted batches of 32, from each
    batch's fastest pass over ``reps`` turns."""
    models = {name: loaded(backend, tag) for name, tag in zip(labels(tags), tags)}
    names = list(models)
    ids = models[names[0]][2]
    work = {"alone": [[one] for one in ids[:LONE_TEXTS]], "sorted-32": batches(ids[:STREAM_TEXTS], "sorted-32")}
    fastest = {name: {mode: [float("inf")] * len(runs) for mode, runs in work.items()} for name in names}
    for turn in range(reps):
        for name in names if turn % 2 == 0 else names[::-1]:
            model, spec, _ = models[name]
            for mode, runs in work.items():
                for index, texts in enumerate(runs):
                    started = time.perf_counter()
                    run_batch(model, texts, spec.pad_id, settings.token_budget)
                    fastest[name][mode][index] = min(fastest[name][mode][index], time.perf_counter() - started)
    return {
        name: {
            "backend": models[name][0].name,
            "precision": models[name][0].precision,
            "alone_pass_ms": round(1000 * sum(passes["alone"]) / LONE_TEXTS, 3),
            "sorted_32_texts_per_s": round(STREAM_TEXTS / sum(passes["sorted-32"]), 1),
        }
        for name, passes in fastest.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tags", nargs="+", help="stored models (name:version), the first the yardstick; one named again is loaded again")
    parser.add_argument("--backend", default="onnx-int8")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--note", action="append", default=[], metavar="TAG=TEXT", help="what a tag's graph is (repeatable)")
    parser.add_argument("--patch", action="append", default=[], metavar="TAG=FILE", help="the code change a tag was imported with")
    parser.add_argument("--output", default="stored-graphs.json")
    args = parser.parse_args()
    tags = [str(bentoml.models.get(tag).tag) for tag in args.tags]
    rows = fastest_passes(tags, args.backend, args.reps)
    first = rows[tags[0]]  # named as given: the first is never numbered
    for row in rows.values():
        row["sorted_32_over_first"] = round(row["sorted_32_texts_per_s"] / first["sorted_32_texts_per_s"], 3)
        row["alone_pass_over_first"] = round(row["alone_pass_ms"] / first["alone_pass_ms"], 3)
    notes = dict(note.split("=", 1) for note in args.note)
    patches = {tag: Path(file).read_text() for tag, file in (patch.split("=", 1) for patch in args.patch)}
    print(rows)
    write_result(args.output, {"reps": args.reps, "threads": settings.runner_threads, "graphs": rows, "notes": notes, "patches": patches})


if __name__ == "__main__":
    main()
