"""docs/performance.md, and README.md's generated blocks, from the result files in bench/results/.

``python -m bench.performance`` (``make report``). Every table names its result file with the CPU class, date
and commit that file records ("not recorded" where it records none). Nothing here is measured or typed in by
hand: rerun the make target that writes a file, then this. A missing file skips its section.
README.md's blocks between ``<!-- make report: NAME -->`` and ``<!-- /make report -->`` are rewritten:
``performance`` (peers.json, bench.json), ``images`` (image-*.json) and ``settings`` (serving/settings.py).
Only the standard library."""

from __future__ import annotations

import ast
import re
import statistics
from pathlib import Path

from harness.results import RESULTS, cpu_class, load, n, pct, source, table
from reliability.report import reliability

ROOT = RESULTS.parent.parent
PAGE = ROOT / "docs" / "performance.md"
README = ROOT / "README.md"
COMPARE_COLUMNS = (
    "result file; reference; point; this tree texts/s; reference texts/s; ratio, best turns; ratio, median of the turns; "
    "p50 ms, this / reference"
)
FLAVOURS = {"cpu": "make image", "gpu": "make image-gpu", "gpu-torch": "make image-gpu-torch"}


# Helpers: reading a result file, its provenance, numbers and tables.


def point(texts: int, concurrency: int) -> str:
    return f"{texts} text{'s' * (texts > 1)}/request, c={concurrency}"


def find(system: dict, mix: str, texts: int, concurrency: int) -> dict | None:
    """One load point of a system in bench.json."""
    return next((r for r in system["rows"] if (r["mix"], r["texts_per_request"], r["concurrency"]) == (mix, texts, concurrency)), None)


# Sections of docs/performance.md: one function each, given {file name: its data}.


def peers(files: dict) -> list[str]:
    """One table per run: ``peers.json``, then the other runs (``peers-<class>.json``, another CPU class or another run)."""
    lines: list[str] = []
    for name, d in files.items():
        lines += [f"### {cpu_class(d)} (`{name}`)", "", *peers_run(d), ""]
    return lines[:-1]


def peers_run(d: dict) -> list[str]:
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
    if alone := d.get("model_alone"):
        of = d["of_the_model"]
        lines += [
            "",
            f"The model alone here, in process ({alone['backend']}, {alone['precision']}; in each round, both servers idle; "
            f"medians): a lone pass {alone['alone_pass_ms']} ms, {n(alone['sorted_32_texts_per_s'])} texts/s in length-sorted "
            "batches of 32. Served, each round against its own: c=1 p50 "
            f"{of['1x-c1 p50 over a lone pass, ms']} ms over a lone pass; 1 × c64 at {pct(of['1x-c64 texts/s share of sorted-32'])} "
            f"and 32 × c8 at {pct(of['32x-c8 texts/s share of sorted-32'])} of the sorted batches' texts/s.",
        ]
    return lines


def targets(entry: dict) -> list[tuple[str, str, bool]]:
    """The issue's targets for one model: (what, measured, met)."""
    best = max(row["sentences_per_s"] for row in entry["ceiling"])
    batch1_ms = 1000 / next(row["sentences_per_s"] for row in entry["ceiling"] if row["mode"] == "alone")
    ours = entry["systems"]["textbento"]
    naive = entry["systems"].get("naive-fastapi")
    checks = []
    if (r := find(ours, "short", 32, 8)) is not None:
        checks.append(
            ("32 inputs/request, c=8: ≥ 85% of the best ceiling", f"{r['texts_per_s'] / best:.0%}", r["texts_per_s"] >= 0.85 * best)
        )
    if (r := find(ours, "short", 1, 64)) is not None:
        checks.append(
            ("1 input/request, c=64: ≥ 55% of the best ceiling", f"{r['texts_per_s'] / best:.0%}", r["texts_per_s"] >= 0.55 * best)
        )
        if naive and (theirs := find(naive, "short", 1, 64)):
            ratio = r["texts_per_s"] / max(theirs["texts_per_s"], 1e-9)
            checks.append(("1 input/request, c=64: ≥ 4× naive FastAPI", f"{ratio:.1f}×", ratio >= 4))
    if (r := find(ours, "short", 1, 1)) is not None:
        checks.append((f"c=1 p50 ≤ batch-1 latency {batch1_ms:.1f} ms + 3 ms", f"{r['p50_ms']:.1f} ms", r["p50_ms"] <= batch1_ms + 3))
    errors = sum(r["errors"] for r in ours["rows"])
    checks.append(("zero errors at every concurrency ≤ 256", str(errors), errors == 0))
    checks.append(("all processes ≤ 1.5 GiB RSS", f"{ours['peak_rss_mib']:.0f} MiB", ours["peak_rss_mib"] <= 1536))
    return checks


def baselines(files: dict) -> list[str]:
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
        settings = " ".join(f"{k}={v}" for k, v in d.get("this_tree_settings", {}).items())
        against = f"{d['ref']}, this tree with {settings}" if settings else d["ref"]
        for key, r in ours.items():
            ratio, p50 = f"{d['texts_per_s_ratio'][key]:.2f}x", f"{n(r['p50_ms'], 1)} / {n(ref[key]['p50_ms'], 1)}"
            paired = d.get("paired_ratios", {}).get(key)
            spread = f"{statistics.median(paired):.2f}x ({min(paired):.2f}-{max(paired):.2f})" if paired else "not recorded"
            rows.append([f"`{name}`", against, key, n(r["texts_per_s"]), n(ref[key]["texts_per_s"]), ratio, spread, p50])
    return [
        "This tree and an earlier revision served side by side, in turns (`python -m bench.compare REF`; the best turn of each, "
        "and the median of each turn's ratio with its range where the file records them). "
        "Points: `1x-c64` is 1 text/request at c=64, `32x-c8` 32 texts/request at c=8.",
        "",
        *table(COMPARE_COLUMNS.split("; "), rows),
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
    return lines


SECTIONS = [
    ("Against the peer: infinity-emb (`make bench-peers`)", ["peers.json", "peers-*.json"], peers),
    ("Against the baselines (`make bench`)", ["bench.json"], baselines),
    ("Side by side with an earlier revision (`make bench`)", ["compare-*.json"], compare),
    ("int8 by CPU class (`make cpu-classes`)", ["cpu-classes.json"], cpu_classes),
    ("Rerank (`make bench`)", ["rerank.json"], rerank),
    ("The cost of metrics and traces (`make bench`)", ["telemetry-cost.json"], telemetry),
    ("Reliability runs", ["soak.json", "storm.json", "hostile.json", "chaos*.json", "locust-runs*.json"], reliability),
    ("Images", ["image-cpu.json", "image-gpu.json", "image-gpu-torch.json", "image-test.json"], image_details),
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
    lines += (
        [
            "## Other result files",
            "",
            "Behind the decisions of [design.md](design.md), not summarised here: " + ", ".join(f"`{name}`" for name in unused) + ".",
        ]
        if unused
        else []
    )
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
    names = {"naive-fastapi": "naive FastAPI", "fastapi-threadpool": "FastAPI `def`", "bentoml-plain": "plain BentoML"}
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
