"""This tree against another revision of textbento, served side by side on the same machine, in turns.

    python -m bench.compare 90c58c9     # → bench/results/compare-90c58c9.json
    python -m bench.compare HEAD --set TEXTBENTO_MAX_BATCH_SIZE=32 --mixed
        # a setting against the default: → bench/results/compare-HEAD-TEXTBENTO_MAX_BATCH_SIZE-32.json
    python -m bench.compare scratch --points 1x1 --rounds 6 --output compare-scratch-c1.json
        # c=1 alone, against a scratch branch

The machine's speed changes from day to day, so a figure committed another day is no yardstick:
this checks out ``REF`` in a scratch git worktree, imports the embedded all-MiniLM-L6-v2 with
each tree's own import CLI (its own export and quantization), then serves each tree in turns,
several rounds (the first to go alternating), measuring the same points (``POINTS``); each point keeps
its best round, and each round's ratio of the two trees (a pair measured a minute apart) is written too, with their median:
one fast minute can make a tree's best round. Each round also records the server's CPU per request
by part (Encoder, API workers): steadier than a rate on a noisy machine, and where a change to the
way between them shows first. ``--set`` serves this tree with a setting (with ``REF`` = ``HEAD``: the
setting against its default); ``--mixed`` adds 32 texts/request at c=8 of 3-60 words, where sorting by length counts.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import reduce
from pathlib import Path

import bentoml

from harness.load import closed_loop
from harness.results import write_result
from harness.serving import MACHINE_SHARES, ROOT, cpu_ms_per, cpu_seconds, machine_shares, machine_times, serve
from harness.texts import mixed_texts, short_texts

POINTS = [(1, 1), (1, 64), (32, 8)]  # (texts per request, concurrency), of 5-30 words
MIXED = (32, 8)  # of 3-60 words, with --mixed


@contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """``ref`` checked out in a scratch git worktree, removed afterwards (with the directory it was made in)."""
    with tempfile.TemporaryDirectory(prefix="textbento-compare-") as scratch:
        tree = Path(scratch) / "ref"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=ROOT, check=True, capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=True)


def import_default(tree: Path, name: str) -> str:
    """The embedded model imported by ``tree``'s own CLI as ``name``; its tag."""
    command = [sys.executable, "-m", "train_import.import_model", "--name", name]
    return subprocess.run(command, cwd=tree, check=True, capture_output=True, text=True).stdout.strip()


def measure(
    tree: Path, tag: str, seconds: float, points: list[tuple[int, int]], settings: dict | None = None, mixed: bool = False
) -> dict[str, dict]:
    """Each point's closed-loop figures against ``tree`` serving ``tag`` (with ``settings``, TEXTBENTO_* variables),
    and with ``mixed`` the ``MIXED`` point of texts of 3-60 words."""
    with serve(env={"TEXTBENTO_MODEL": tag, **(settings or {})}, cwd=tree) as server:
        url, pid = server.url + "/v1/embeddings", server.process.pid
        rows = {f"{k}x-c{c}": load(url, k, c, seconds, pid=pid) for k, c in points}
        if mixed:
            k, c = MIXED
            rows[f"{k}x-c{c}-mixed"] = load(url, k, c, seconds, pid=pid, texts=mixed_texts(2048))
        return rows


def load(
    url: str,
    per_request: int,
    concurrency: int,
    seconds: float,
    *,
    model: str | None = None,
    pid: int | None = None,
    texts: list[str] | None = None,
) -> dict:
    """One point's closed-loop figures against ``url``, after a short warm-up (``model`` named in each
    body where given), of ``texts`` (short ones by default), and the shares of the machine's cores that
    stood idle and that the hypervisor took meanwhile; with ``pid``, the CPU per request of that
    server's processes meanwhile, in all and by part."""
    texts = texts or short_texts(2048)
    named = {"model": model} if model else {}
    body = lambda i: {**named, "input": [texts[(i * per_request + j) % len(texts)] for j in range(per_request)]}
    asyncio.run(closed_loop(url, body, concurrency=concurrency, requests=4 * concurrency, deadline_s=5))  # warm-up
    before = cpu_seconds(pid) if pid else {}
    machine = machine_times()
    result = asyncio.run(closed_loop(url, body, concurrency=concurrency, requests=10**6, deadline_s=seconds, texts_per_request=per_request))
    shares = machine_shares(machine, machine_times())
    if not pid:
        return {**result.summary(), **shares}
    by_part = cpu_ms_per(before, cpu_seconds(pid), result.statuses[200])
    return {**result.summary(), "cpu_ms_per_request": round(sum(by_part.values()), 2), "cpu_ms_per_request_by_part": by_part, **shares}


def median_rows(rounds: list[dict[str, dict]], points: Iterable[str], keys: Iterable[str]) -> dict[str, dict]:
    """Each point's median of each figure over ``rounds`` (each a ``load`` row per point name)."""
    return {point: {key: statistics.median(r[point][key] for r in rounds) for key in keys} for point in points}


def better(old: dict | None, new: dict) -> dict:
    """The better of two rounds of one point: lower p50 at c=1, more texts/s otherwise."""
    if old is None:
        return new
    if new["concurrency"] == 1:
        return new if new["p50_ms"] < old["p50_ms"] else old
    return new if new["texts_per_s"] > old["texts_per_s"] else old


def points(text: str) -> list[tuple[int, int]]:
    """``1x1,32x8`` → [(1, 1), (32, 8)]: (texts per request, concurrency)."""
    return [(int(texts), int(concurrency)) for texts, concurrency in (point.split("x") for point in text.split(","))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ref", help="git revision to compare with, e.g. the last landed commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--set", action="append", default=[], metavar="TEXTBENTO_NAME=VALUE", help="a setting of this tree's server")
    parser.add_argument("--mixed", action="store_true", help="also 32 texts/request at c=8 of 3-60 words")
    parser.add_argument("--points", type=points, default=POINTS, help="TEXTSxCONCURRENCY[,...] (default: 1x1,1x64,32x8)")
    parser.add_argument("--output", help="the result file's name in bench/results/ (default: from REF and the settings)")
    args = parser.parse_args()
    settings = dict(setting.split("=", 1) for setting in args.set)
    result_name = args.output or "-".join([f"compare-{args.ref}", *(f"{key}-{value}" for key, value in settings.items())]) + ".json"
    trees: dict[str, tuple[Path, str]] = {}
    with worktree(args.ref) as ref_tree:
        try:
            trees = {
                "this tree": (ROOT, import_default(ROOT, "compare-this")),
                args.ref: (ref_tree, import_default(ref_tree, "compare-ref")),
            }
            rounds: dict[str, list[dict[str, dict]]] = {name: [] for name in trees}
            for turn in range(args.rounds):  # the order reversed every other round: going first or second is no edge
                for name, (tree, tag) in list(trees.items())[:: 1 if turn % 2 == 0 else -1]:
                    ours = settings if tree == ROOT else None
                    rounds[name].append(measure(tree, tag, args.seconds, args.points, ours, mixed=args.mixed))
                    figures = ("texts_per_s", "p50_ms", "errors", "cpu_ms_per_request")
                    print(name, {point: tuple(row[key] for key in figures) for point, row in rounds[name][-1].items()}, flush=True)
        finally:
            for _, tag in trees.values():  # a new version per run otherwise: ~270 MB each, left in the store
                bentoml.models.delete(tag)
    best = {name: {point: reduce(better, (one[point] for one in measured)) for point in measured[0]} for name, measured in rounds.items()}

    def ratio(ours: dict, theirs: dict, point: str) -> float:
        return round(ours[point]["texts_per_s"] / theirs[point]["texts_per_s"], 2)

    ratios = {point: ratio(best["this tree"], best[args.ref], point) for point in best[args.ref]}
    paired = {point: [ratio(ours, theirs, point) for ours, theirs in zip(rounds["this tree"], rounds[args.ref])] for point in ratios}
    report = {
        "ref": args.ref,
        "this_tree_settings": settings,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "results": best,
        "texts_per_s_ratio": ratios,
        "paired_ratios": paired,
        "median_paired_ratio": {point: round(statistics.median(values), 3) for point, values in paired.items()},
        "texts_per_s_by_round": {name: [{k: row["texts_per_s"] for k, row in one.items()} for one in rounds[name]] for name in trees},
        "p50_ms_by_round": {name: [{k: row["p50_ms"] for k, row in one.items()} for one in rounds[name]] for name in trees},
        "cpu_ms_per_request_by_round": {
            name: [{k: row["cpu_ms_per_request_by_part"] for k, row in one.items()} for one in rounds[name]] for name in trees
        },
        "machine_shares_by_round": {
            name: [{k: {share: row[share] for share in MACHINE_SHARES} for k, row in one.items()} for one in rounds[name]] for name in trees
        },
    }
    write_result(result_name, report, indent=2)
    print("texts/s, this tree / ref, best rounds:", ratios, "median of the paired rounds:", report["median_paired_ratio"])


if __name__ == "__main__":
    main()
