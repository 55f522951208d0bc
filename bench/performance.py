"""docs/performance.md, and README.md's generated blocks, from the result files in bench/results/.

``python -m bench.performance`` (``make report``). Every table names its result file with the CPU class and
date that file records ("not recorded" where it records none). Nothing here is measured or typed in by
hand: rerun the make target or study that writes a file, then this. A missing file skips its section.
README.md's blocks between ``<!-- make report: NAME -->`` and ``<!-- /make report -->`` are rewritten:
``performance`` (peers.json, bench.json), ``images`` (image-*.json) and ``settings`` (serving/settings.py).
Only the standard library."""

from __future__ import annotations

import ast
import json
import re
import statistics
from pathlib import Path

from bench import RESULTS

ROOT = RESULTS.parent.parent
PAGE = ROOT / "docs" / "performance.md"
README = ROOT / "README.md"
FLAVOURS = {"cpu": "make image", "gpu": "make image-gpu", "gpu-torch": "make image-gpu-torch"}


# Helpers: reading a result file, its provenance, numbers and tables.


def load(name: str):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.is_file() else None


def cpu_class(data) -> str:
    cpu = data.get("cpu") if isinstance(data, dict) else None
    if cpu:
        return f"{cpu['model']} ({cpu['machine']}; {' '.join(cpu['flags'])})"
    machine = data.get("machine") if isinstance(data, dict) else None
    return machine.get("cpu_class", "not recorded") if isinstance(machine, dict) else "not recorded"


def source(name: str, data) -> str:
    date = str(data.get("date", ""))[:10] if isinstance(data, dict) else ""
    return f"`bench/results/{name}`: CPU {cpu_class(data)}; date {date or 'not recorded'}."


def n(value, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def pct(value) -> str:
    return f"{value:.0%}" if round(value, 2) == value else f"{value:.1%}"


def table(headers: list[str], rows: list[list]) -> list[str]:
    """A Markdown table; a column of numbers is right-aligned."""
    numeric = [all(re.match(r"[-+\d.,–]*(x|%| / [\d.,]+%?)?$", str(row[i])) for row in rows) for i in range(len(headers))]
    align = ["---:" if i and is_number else "---" for i, is_number in enumerate(numeric)]
    return [f"| {' | '.join(headers)} |", f"|{'|'.join(align)}|", *(f"| {' | '.join(str(c) for c in row)} |" for row in rows)]


def point(texts: int, concurrency: int) -> str:
    return f"{texts} text{'s' * (texts > 1)}/request, c={concurrency}"


def find(system: dict, mix: str, texts: int, concurrency: int) -> dict | None:
    """One load point of a system in bench.json."""
    return next((r for r in system["rows"] if (r["mix"], r["texts_per_request"], r["concurrency"]) == (mix, texts, concurrency)), None)


# Sections of docs/performance.md: one function each, given {file name: its data}.


def peers(files: dict) -> list[str]:
    d = files["peers.json"]
    ours, peer = d["medians"]["textbento"], d["medians"]["infinity"]
    rows = []
    for key, p in d["points"].items():
        field, unit, digits = ("p50_ms", "p50 ms, lower is better", 1) if p["concurrency"] == 1 else ("texts_per_s", "texts/s", 0)
        ratio = f"{ours[key][field] / peer[key][field]:.2f}x"
        rows.append(
            [f"{point(p['texts_per_request'], p['concurrency'])}: {unit}", n(ours[key][field], digits), n(peer[key][field], digits), ratio]
        )
    for key, p in d["points"].items():
        if "cpu_ms_per_request" in ours[key] and "cpu_ms_per_request" in peer[key]:
            mine, theirs = ours[key]["cpu_ms_per_request"], peer[key]["cpu_ms_per_request"]
            label = f"{point(p['texts_per_request'], p['concurrency'])}: server CPU ms per request"
            rows.append([label, n(mine, 2), n(theirs, 2), f"{mine / theirs:.2f}x"])
    rows.append(["errors", sum(r["errors"] for r in ours.values()), sum(r["errors"] for r in peer.values()), ""])
    f = d["fidelity_to_transformers_fp32"]
    rows.append(
        ["min / mean cosine to transformers fp32", *(f"{f[s]['min_cosine']} / {f[s]['mean_cosine']}" for s in f if s != "texts"), ""]
    )
    rows.append(["nearest neighbours agreeing", *(pct(f[s]["nearest_neighbours"]) for s in f if s != "texts"), ""])
    paired = d.get("paired_ratios")
    how = "both up, each point measured on one and then the other" if paired else "loaded in turns"
    lines = [
        f"The same model on the same machine, {how}, {d['rounds']} rounds, medians; the peer is {d['peer']}. "
        f"textbento served `{d['textbento']['backend']}`, {d['textbento']['precision']}. Fidelity over {f['texts']} texts.",
        "",
        *table(["all-MiniLM-L6-v2", "textbento", "infinity-emb", "ours / peer"], rows),
    ]
    if paired:
        each = "; ".join(f"{key} " + ", ".join(f"{r:.2f}x" for r in ratios) for key, ratios in paired.items())
        lines += ["", f"Ours / peer in each round's pair (p50 at c=1, texts/s elsewhere): {each}."]
    return lines


def baselines(files: dict) -> list[str]:
    from bench.report import targets  # the targets' one definition, stdlib-only at import

    lines = []
    for task, entry in files["bench.json"]["models"].items():
        systems = entry["systems"]
        rows = []
        for r in systems["textbento"]["rows"]:
            key = (r["mix"], r["texts_per_request"], r["concurrency"])
            cells = [find(system, *key) for system in systems.values()]
            latencies = [f"{n(c['texts_per_s'])} (p50 {n(c['p50_ms'])}, p99 {n(c['p99_ms'])})" if c else "–" for c in cells]
            rows.append([f"{key[0]}, {point(*key[1:])}", *latencies])
        rows.append(["errors, all points", *(sum(r["errors"] for r in s["rows"]) for s in systems.values())])
        rows.append(["peak RSS, all processes, MiB", *(n(s["peak_rss_mib"]) for s in systems.values())])
        ceiling = ", ".join(f"{c['mode']} {n(c['sentences_per_s'])}" for c in entry["ceiling"])
        lines += [f"### {task}: `{entry['tag']}`, textbento on `{entry['backend']}`", "", "texts/s (p50, p99 ms):", ""]
        lines += [*table(["point", *systems], rows), "", f"In-process ceiling of the served graph, sentences/s: {ceiling}.", ""]
        lines += table(["target", "measured", "met"], [[what, got, "yes" if ok else "**no**"] for what, got, ok in targets(entry)]) + [""]
    return lines


def compare(files: dict) -> list[str]:
    rows = []
    for name, d in files.items():
        ours, ref = d["results"]["this tree"], d["results"][d["ref"]]
        for key, r in ours.items():
            ratio, p50 = f"{d['texts_per_s_ratio'][key]:.2f}x", f"{n(r['p50_ms'], 1)} / {n(ref[key]['p50_ms'], 1)}"
            paired = d.get("paired_ratios", {}).get(key)
            spread = f"{statistics.median(paired):.2f}x ({min(paired):.2f}-{max(paired):.2f})" if paired else "not recorded"
            rows.append([f"`{name}`", d["ref"], key, n(r["texts_per_s"]), n(ref[key]["texts_per_s"]), ratio, spread, p50])
    return [
        "This tree and an earlier revision served side by side, in turns (`python -m bench.compare REF`; the best turn of each, "
        "and the median of each turn's ratio with its range where the file records them). "
        "Points: `1x-c64` is 1 text/request at c=64, `32x-c8` 32 texts/request at c=8.",
        "",
        *table(
            [
                "result file",
                "reference",
                "point",
                "this tree texts/s",
                "reference texts/s",
                "ratio, best turns",
                "ratio, median of the turns",
                "p50 ms, this / reference",
            ],
            rows,
        ),
    ]


def ceiling(files: dict) -> list[str]:
    d = files["ceiling.json"]
    modes = list(next(iter(d["sentences_per_s"].values())))
    speed = [[graph, *(n(v[m]) for m in modes)] for graph, v in d["sentences_per_s"].items()]
    accuracy = [
        [g, a["min"], a["mean"], pct(a["nearest_neighbour_agreement"]), a["alone_vs_batched_min"]] for g, a in d["accuracy"].items()
    ]
    return [
        f"{d['texts']}, {d['threads']} threads, best of {d['rounds']} turns (1-minute load average "
        f"{', '.join(f'{x:.1f}' for x in d['load_average_1m'])}), sentences/s:",
        "",
        *table(["graph", *modes], speed),
        "",
        f"Accuracy: {d['accuracy_texts']}.",
        "",
        *table(["graph", "min cosine", "mean", "nearest neighbours", "alone vs batched, min"], accuracy),
    ]


def quantization(files: dict) -> list[str]:
    d = files["quantization.json"]
    rows = [
        [r, v["min"], v["mean"], pct(v["nearest_neighbour_agreement"]), v["alone_vs_batched_min"], n(v["alone"]), n(v["sorted-32"])]
        for r, v in d["results"].items()
    ]
    return [
        f"Accuracy: {d['accuracy_texts']}. Speed: {d['speed']}.",
        "",
        *table(["recipe", "min cosine", "mean", "nearest neighbours", "alone vs batched", "alone/s", "sorted-32/s"], rows),
    ]


def cpu_classes(files: dict) -> list[str]:
    d = files["cpu-classes.json"]
    rows = [["this machine", r, v["min"], v["mean"], n(v.get("alone")), n(v.get("sorted-32"))] for r, v in d["here"]["recipes"].items()]
    rows += [
        [f"AVX2 only, emulated ({d['avx2_emulated']['qemu']})", r, v["min"], v["mean"], "–", "–"]
        for r, v in d["avx2_emulated"]["recipes"].items()
    ]
    check = d["self_check"]
    return [
        f"This machine: {d['here']['class']}. Accuracy: {d['accuracy']}. Speed: {d['speed']}.",
        "",
        *table(["CPU class", "recipe", "min cosine", "mean", "alone/s", "sorted-32/s"], rows),
        "",
        f"Start-up self-check here: `auto` loads in {check['load_auto_s']} s against {check['load_onnx_int8_s']} s for `onnx-int8` alone, "
        f"and serves {check['auto']['precision']}; emulated AVX2: {d['avx2_emulated']['auto']['precision']}.",
    ]


def rerank(files: dict) -> list[str]:
    d = files["rerank.json"]
    rows = [[s, n(r["texts_per_s"]), n(r["p50_ms"]), n(r["p99_ms"]), r["errors"]] for s, r in d["systems"].items()]
    return [
        f"{d['point']}, a cross-encoder (`{d['model']}`); textbento / naive FastAPI: {d['pairs_per_s_ratio']}x.",
        "",
        *table(["system", "pairs/s", "p50 ms", "p99 ms", "errors"], rows),
    ]


def telemetry(files: dict) -> list[str]:
    d = files["telemetry-cost.json"]
    spread = {k: f"{n(min(r['texts_per_s'] for r in v))}-{n(max(r['texts_per_s'] for r in v))}" for k, v in d["rounds"].items()}
    rows = [[f"`TEXTBENTO_METRICS` {k}", n(v, 1), spread[k]] for k, v in d["median_texts_per_s"].items()]
    return [
        f"The same tree served twice, metrics on and off, loaded in turns at {d['point']}; cost: {d['overhead']:.1%}.",
        "",
        *table(["server", "median texts/s", "range over the turns"], rows),
    ]


def profiles(files: dict) -> list[str]:
    works = list(dict.fromkeys(w for d in files.values() for w in d["by_work"]))
    headers = [
        "share of sampled CPU",
        *(f"`{name}` ({point(d['load']['texts_per_request'], d['load']['concurrency'])})" for name, d in files.items()),
    ]
    rows = [[w, *(pct(d["by_work"][w]) if w in d["by_work"] else "–" for d in files.values())] for w in works]
    rows += [[f"role: {role}", *(pct(d["by_role"].get(role, 0)) for d in files.values())] for role in ("Encoder", "API worker")]
    rows += [["CPU ms per request, all processes", *(n(d.get("cpu_ms_per_request"), 3) for d in files.values())]]
    rows += [
        [f"CPU ms per request: {role}", *(n(d.get("cpu_ms_per_request_by_role", {}).get(role), 3) for d in files.values())]
        for role in ("Encoder", "API worker")
    ]
    return [
        "py-spy on every process of the service under load (`python -m bench.studies.profile`); Python threads only.",
        "",
        *table(headers, rows),
    ]


def threads(files: dict) -> list[str]:
    rows = [
        [size, *(f"{n(f['wall_ms'], 2)} / {n(f['cpu_ms'], 2)}" for f in by_threads.values())]
        for size, by_threads in files["threads.json"]["per_pass"].items()
    ]
    counts = list(next(iter(files["threads.json"]["per_pass"].values())))
    return [
        "Wall / CPU ms per forward pass of the served int8 graph, by pass size, short texts (`python -m bench.studies.threads`):",
        "",
        *table(["texts per pass", *counts], rows),
    ]


def memory(files: dict) -> list[str]:
    rows = [[d["workers"], n(d["total_mib"]), n(d.get("per_extra_worker_mib"))] for d in files["memory.json"]]
    budget = files["budget.json"]
    lines = [
        "RSS by API worker count (`python -m bench.studies.memory`):",
        "",
        *table(["API workers", "total MiB", "per extra worker MiB"], rows),
        "",
    ]
    rows = [[r["token_budget"], n(r["texts_per_s"], 1), n(r["rss_mib"])] for r in budget["rows"]]
    return lines + [
        f"Token budget (`python -m bench.studies.budget`, `{budget['model']}`, {budget['texts']}):",
        "",
        *table(["`TEXTBENTO_TOKEN_BUDGET`", "texts/s", "RSS MiB"], rows),
    ]


def several_models(files: dict) -> list[str]:
    d = files["several-models.json"]
    rss = [
        [what, n(v["total"]), ", ".join(f"{k} {n(x)}" for k, x in v.items() if k != "total")]
        for what, v in d["rss_mib_after_warmup"].items()
    ]
    rounds = [
        [i + 1, *(r["mixed_vs_alone"].values()), r["sum_of_mixed_vs_alone"], r["minilm_three_model_server_vs_one_model_server"]]
        for i, r in enumerate(d["rounds"])
    ]
    names = list(d["rounds"][0]["mixed_vs_alone"])
    return [
        f"RSS after warm-up, MiB; an API worker grows {d['api_worker_growth_per_extra_tokenizer_mib']} MiB per extra tokenizer:",
        "",
        *table(["server", "total", "per process"], rss),
        "",
        f"Each model's answers/s with all three loaded at once against itself alone "
        f"(c={d['concurrency']} per model, {d['seconds']} s per run):",
        "",
        *table(["repeat", *names, "sum", "minilm: three-model / one-model server"], rounds),
    ]


def goodput(files: dict) -> list[str]:
    rows = []
    for name, d in files.items():
        for tree, t in d["trees"].items():
            shares = " / ".join(pct(g["share_of_capacity"]) for g in t["goodput"].values())
            probe = f"{n(t['probe']['texts_computed'])} / {n(t['probe']['answered_in_time'])}"
            rows.append([f"`{name}`", tree, n(t["capacity_per_s"]), shares, probe])
    return [
        "Clients that give up after 1 s and retry once, offered 1x, 2x and 4x the capacity (`python -m bench.studies.goodput`); "
        "the probe: requests given up after 0.25 s.",
        "",
        *table(
            [
                "result file",
                "tree",
                "capacity (c=64), answers/s",
                "answered in time at 1x / 2x / 4x",
                "probe: texts computed / answered in time",
            ],
            rows,
        ),
    ]


def storm(d: dict) -> list[str]:
    rss = ", ".join(f"{name.split()[0]} {change:+.1%}" for name, change in d["rss_change"].items() if not name.startswith("supervisor"))
    files = ", ".join(f"{start} → {end}" for name, (start, end) in d["open_files"].items() if not name.startswith("supervisor"))
    return [
        f"Disconnect storm (`make storm`): {n(d['requests'])} requests at c={d['concurrency']} in {d['seconds']} s, {d['outcomes']}; "
        f"every gauge back to idle after {d['settled_s']} s; RSS {rss}; open files {files}; "
        f"the {n(sum(d['after'].values()))} requests after: {d['after']}. "
        + ("Passed." if d["passed"] else f"**Failed**: {'; '.join(d['failures'])}."),
        "",
    ]


def hostile(d: dict) -> list[str]:
    """One row per phase of ``make hostile``: what was sent, what it got, and what came back to its start."""
    rows = []
    for name, phase in d["phases"].items():
        before, after = phase["before"], phase["after"]
        rows.append(
            [
                f"`{name}`",
                ", ".join(f"{status}: {n(count)}" for status, count in sorted(phase["statuses"].items())),
                f"{n(before['metrics_bytes'])} → {n(after['metrics_bytes'])}",
                f"{before['rss_mib']:.0f} → {after['rss_mib']:.0f}",
                f"{before['open_files']} → {after['open_files']}",
                ", ".join(f"{status}: {n(count)}" for status, count in phase["next"]["statuses"].items()),
            ]
        )
    lines = [f"Hostile clients (`make hostile`, keys set): {d['seconds']} s; " + ("passed." if d["passed"] else "**failed**."), ""]
    lines += table(["phase", "answers", "/metrics bytes", "RSS MiB", "open files", "the next 1,000"], rows) + [""]
    return lines + ([f"Failures: {'; '.join(d['failures'])}.", ""] if d["failures"] else [])


def reliability(files: dict) -> list[str]:
    soak = files["soak.json"]
    lines = [
        f"Soak (`make soak`): {soak['minutes']:g} min at c={soak['concurrency']}, {n(soak['requests'])} requests, {soak['errors']} errors, "
        f"p99 {n(soak['p99_ms'])} ms; RSS {soak['rss_mib_after_warmup']} → {soak['rss_mib_end']} MiB after warm-up "
        f"({soak['rss_growth']:+.1%}).",
        "",
    ]
    if "storm.json" in files:
        lines += storm(files["storm.json"])
    if "hostile.json" in files:
        lines += hostile(files["hostile.json"])
    chaos = {k: v for k, v in files.items() if k.startswith("chaos")}
    rows = [
        [
            f"`{k}`",
            f"{d['minutes']:g}",
            n(d["requests"]),
            n(d["statuses"].get("200", 0)),
            d["dropped_connections_at_worker_kills"],
            len(d["kills"]),
            d["slowest_s"],
            f"{d['rss_growth']:+.1%}",
            "yes" if d["passed"] else "**no**",
        ]
        for k, d in chaos.items()
    ]
    lines += ["Chaos (`make chaos`: the Encoder and an API worker SIGKILLed under load at c=64):", ""]
    lines += table(
        ["result file", "minutes", "requests", "200", "dropped at worker kills", "kills", "slowest s", "RSS", "passed"], rows
    ) + [""]
    locust = {k: v for k, v in files.items() if k.startswith("locust")}
    rows = [
        [f"`{k}`", d.get("revision", "–"), d["runs"], d["runs_with_failures"], n(d["requests"]), d["failures"]] for k, d in locust.items()
    ]
    lines += ["The shipped locustfile against fresh servers (`make locust-runs`):", ""]
    return lines + table(["result file", "revision", "runs", "runs with failures", "requests", "failures"], rows)


def decoders(files: dict) -> list[str]:
    d, lines = files["decoder-footprint.json"], []
    for name, m in d["models"].items():
        rows = [[b["backend"], b["served"], n(b["sentences_per_s"], 1), n(b["peak_rss_mib"]), b["load_s"]] for b in m["backends"]]
        lines += [
            f"**{name}**: import {m['import_s']} s at {n(m['import_peak_rss_mib'])} MiB peak RSS, {n(m['stored_mib'], 1)} MiB stored.",
            "",
        ]
        lines += table(["backend", "served", "sentences/s", "peak RSS MiB", "load s"], rows) + [""]
    return [f"{d['what']}; {d['texts']} texts, {d['runner_threads']} threads, token budget {d['token_budget']}.", "", *lines]


def sparse(files: dict) -> list[str]:
    d = files["sparse-int8.json"]
    rows = []
    for shape, s in d["shapes"].items():
        probe, ordinary = s["probe"], s["ordinary"]
        speed = f"{n(s['sentences_per_s']['fp32'])} / {n(s['sentences_per_s']['int8'])}"
        flipped = f"{probe['flipped_l1_share_max']:.3%} / {ordinary['flipped_l1_share_max']:.3%}"
        rows.append([shape, speed, s["int8_over_fp32"], f"{probe['cosine_min']} / {probe['cosine_mean']}", flipped, s["auto"]["served"]])
    return [
        f"{d['what']}; {d['texts']} texts, best of {d['rounds']}.",
        "",
        *table(
            ["shape", "fp32 / int8 sentences/s", "int8/fp32", "probe cosine min / mean", "max flipped mass, probe / 300", "`auto` serves"],
            rows,
        ),
    ]


def multivector(files: dict) -> list[str]:
    d = files["multivector-int8.json"]
    rows = []
    for shape, s in d["shapes"].items():
        torch_, onnx = s["against_pylate"]["torch"], s["against_pylate"]["onnx fp32"]
        check, found = s["self_check"], s["retrieval"]
        rows.append(
            [
                shape,
                f"{torch_['max_abs_vector_diff']:.1e} / {onnx['max_abs_vector_diff']:.1e}",
                f"{onnx['max_abs_score_diff']:.1e}",
                "yes" if torch_["same_order_every_query"] and onnx["same_order_every_query"] else "no",
                f"{check['min_cosine']} / {check['mean_cosine']}",
                check["max_maxsim_error"],
                f"{found['recall_at_10_mean']} / {found['top1_same']}",
                f"{n(s['documents_per_s']['fp32'], 1)} / {n(s['documents_per_s']['int8'], 1)}",
                s["auto"],
            ]
        )
    headers = [
        "shape",
        "vectors to PyLate, torch / fp32 ONNX",
        "MaxSim to PyLate",
        "PyLate's order",
        "int8 token cosine min / mean",
        "int8 MaxSim error per query token",
        "int8 recall@10 / top-1",
        "fp32 / int8 documents/s",
        "`auto` serves",
    ]
    return [f"{d['what']}; best of {d['rounds']}.", "", *table(headers, rows)]


def images(files: dict) -> list[str]:
    test = files.get("image-test.json", {}).get("images", {})
    rows = []
    for flavour, target in FLAVOURS.items():
        if (d := files.get(f"image-{flavour}.json")) is None:
            rows.append([flavour, f"`{target}`", "missing", "", "", ""])
            continue
        tested = next((t for t in test.values() if t["flavour"] == flavour and t["model"].startswith("minilm")), {})
        rows.append(
            [
                flavour,
                f"`{target}`",
                n(d["size_mb"]),
                d["build_s"],
                n(tested.get("cold_start_s"), 1),
                f"`image-{flavour}.json`, `image-test.json`",
            ]
        )
    return table(["flavour", "built by", "size MB (MiniLM)", "build s", "cold start s", "result files"], rows)


def image_details(files: dict) -> list[str]:
    lines = [*images(files), ""]
    if test := files.get("image-test.json"):
        rows = [[f"`{name}`", t["flavour"], n(t["size_mb"]), t["build_s"], t["cold_start_s"]] for name, t in test["images"].items()]
        lines += [
            f"`{test['command']}` (container start to `/readyz` 200; the GPU images on a host without a GPU):",
            "",
            *table(["image", "flavour", "size MB", "build s", "cold start s"], rows),
            "",
        ]
    if slim := files.get("image-slim.json"):
        rows = [
            ["as `bentoml containerize` makes it", n(slim["before_mb"]), ""],
            *([s["change"], n(s["size_mb"]), n(s["saved_mb"])] for s in slim["steps"]),
        ]
        lines += [f"The CPU image slimmed step by step ({slim['host']}):", "", *table(["step", "size MB", "saved MB"], rows)]
    return lines


def topology(files: dict) -> list[str]:
    rows = [
        [
            shape,
            point(r["texts_per_request"], r["concurrency"]),
            n(r["texts_per_s"], 1),
            n(r["p50_ms"], 1),
            n(r["p99_ms"], 1),
            r["calls_per_batch"],
        ]
        for shape, runs in files["topology.json"].items()
        for r in runs
    ]
    return [
        "One hop (tokenizers in the API workers) against two (a Tokenizer service between):",
        "",
        *table(["topology", "load", "texts/s", "p50 ms", "p99 ms", "calls per batch"], rows),
    ]


SECTIONS = [
    ("Against the peer: infinity-emb (`make bench-peers`)", ["peers.json"], peers),
    ("Against the baselines (`make bench`)", ["bench.json"], baselines),
    ("Side by side with earlier revisions (`make bench`)", ["compare-*.json"], compare),
    ("In-process ceiling per graph and batching (`make bench`)", ["ceiling.json"], ceiling),
    ("int8 recipes (`python -m bench.studies.quantization`)", ["quantization.json"], quantization),
    ("int8 by CPU class (`make cpu-classes`)", ["cpu-classes.json"], cpu_classes),
    ("Rerank (`make bench`)", ["rerank.json"], rerank),
    ("The cost of metrics and traces (`make bench`)", ["telemetry-cost.json"], telemetry),
    ("Where the CPU goes", ["profile-*.json"], profiles),
    ("The runner's threads per pass (`python -m bench.studies.threads`)", ["threads.json"], threads),
    ("Memory", ["memory.json", "budget.json"], memory),
    ("Several models in one server (`python -m bench.studies.several_models`)", ["several-models.json"], several_models),
    ("Under impatient load", ["goodput*.json"], goodput),
    ("Reliability runs", ["soak.json", "storm.json", "hostile.json", "chaos*.json", "locust-runs*.json"], reliability),
    ("Decoder-only embedders (`python -m bench.studies.decoder_footprint`)", ["decoder-footprint.json"], decoders),
    ("SPLADE: int8 against fp32 (`python -m bench.studies.sparse_int8`)", ["sparse-int8.json"], sparse),
    (
        "Multi-vector (ColBERT): against PyLate, int8 against fp32 (`python -m bench.studies.multivector_int8`)",
        ["multivector-int8.json"],
        multivector,
    ),
    ("Images", ["image-cpu.json", "image-gpu.json", "image-gpu-torch.json", "image-test.json", "image-slim.json"], image_details),
    ("Topology", ["topology.json"], topology),
]


def section(title: str, patterns: list[str], render) -> tuple[list[str], set[str]]:
    names = [p.name for pattern in patterns for p in sorted(RESULTS.glob(pattern))]
    missing = [p for p in patterns if not any(Path(name).match(p) for name in names)]
    lines = [f"## {title}", ""]
    if missing:
        return lines + [f"Skipped: `bench/results/{missing[0]}` is missing.", ""], set(names)
    files = {name: load(name) for name in names}
    return lines + [*render(files), "", "Measured on:", "", *(f"- {source(k, d)}" for k, d in files.items()), ""], set(names)


def page() -> str:
    lines = [
        "# Performance",
        "",
        "Generated by `make report` (`python -m bench.performance`) from the result files in `bench/results/`; do not edit by hand.",
        "Each section names its result files with the CPU class and date each records. Figures from different files come from",
        "different runs, often on different days, and this machine's speed varies from day to day: compare within a table.",
        "Why each decision was taken: [design.md](design.md); faults and overload: [reliability.md](reliability.md).",
        "",
    ]
    used = set()
    for title, patterns, render in SECTIONS:
        body, names = section(title, patterns, render)
        lines += body
        used |= names
    unused = sorted(p.name for p in RESULTS.iterdir() if p.suffix == ".json" and p.name not in used)
    lines += ["## Other result files", "", "Not summarised here: " + ", ".join(f"`{name}`" for name in unused) + "."] if unused else []
    return "\n".join(lines).rstrip() + "\n"


# README.md's generated blocks.


def readme_performance() -> list[str]:
    peer, bench = load("peers.json"), load("bench.json")
    if peer is None or bench is None:
        return [f"`bench/results/{'peers.json' if peer is None else 'bench.json'}` is missing: run `make bench-peers` and `make bench`."]
    ours, other = peer["medians"]["textbento"], peer["medians"]["infinity"]
    systems = bench["models"]["embed"]["systems"]
    rows = []
    for key, (texts, conc) in {"1x-c1": (1, 1), "1x-c64": (1, 64), "32x-c8": (32, 8)}.items():
        field, digits, unit = ("p50_ms", 1, "p50 ms") if conc == 1 else ("texts_per_s", 0, "texts/s")
        cells = [find(system, "short", texts, conc) for system in systems.values()]
        rows.append(
            [
                f"{point(texts, conc)}: {unit}",
                n(ours[key][field], digits),
                n(other[key][field], digits),
                *(n(c[field], digits) for c in cells),
            ]
        )
    fidelity = peer["fidelity_to_transformers_fp32"]
    rows.append(
        ["min cosine to transformers fp32", fidelity["textbento"]["min_cosine"], fidelity["infinity"]["min_cosine"], *[""] * len(systems)]
    )
    names = {
        "textbento": "textbento",
        "naive-fastapi": "naive FastAPI",
        "fastapi-threadpool": "FastAPI `def`",
        "bentoml-plain": "plain BentoML",
    }
    headers = ["all-MiniLM-L6-v2", "textbento, run A", "infinity-emb, run A", *(f"{names.get(s, s)}, run B" for s in systems)]
    return [*table(headers, rows), "", f"Run A: {source('peers.json', peer)} Run B: {source('bench.json', bench)}"]


def readme_images() -> list[str]:
    names = [f"image-{f}.json" for f in FLAVOURS] + ["image-test.json"]
    files = {name: d for name in names if (d := load(name)) is not None}
    return [*images(files), "", " ".join(source(k, d) for k, d in files.items())]


def readme_settings() -> list[str]:
    """The table of every ``TEXTBENTO_*`` setting, read from serving/settings.py's source (no import)."""
    tree = ast.parse((ROOT / "serving" / "settings.py").read_text())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Settings")
    factories = {"_built_in_model": "`text-model:latest` (a bento: its model)", "_cpu_count": "CPU count"}
    rows = []
    for field in (f for f in cls.body if isinstance(f, ast.AnnAssign) and isinstance(f.value, ast.Call)):
        kw = {k.arg: k.value for k in field.value.keywords}
        if field.value.args:
            default = (
                ast.literal_eval(field.value.args[0]) if isinstance(field.value.args[0], ast.Constant) else ast.unparse(field.value.args[0])
            )
            default = "–" if default in ("", None) else f"`{str(default).lower() if isinstance(default, bool) else default}`"
        else:
            default = factories.get(ast.unparse(kw["default_factory"]), ast.unparse(kw["default_factory"]))
        rows.append([f"`TEXTBENTO_{field.target.id.upper()}`", default, ast.literal_eval(kw["description"])])
    return table(["variable", "default", "meaning"], rows)


def fill(text: str, name: str, lines: list[str]) -> str:
    start, end = f"<!-- make report: {name} -->", "<!-- /make report -->"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    return pattern.sub(lambda _: "\n".join([start, *lines, end]), text, count=1)


def main() -> None:
    PAGE.write_text(page())
    text = README.read_text()
    for name, block in (("performance", readme_performance), ("images", readme_images), ("settings", readme_settings)):
        text = fill(text, name, block())
    README.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)} and README.md's generated blocks")


if __name__ == "__main__":
    main()
