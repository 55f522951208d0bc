"""bench.json → bench.md (tables, ratios, target checks) and PNG plots, all from one run's numbers."""

from __future__ import annotations

from pathlib import Path


def _row(rows: list[dict], mix: str, per_request: int, concurrency: int) -> dict | None:
    return next((r for r in rows if (r["mix"], r["texts_per_request"], r["concurrency"]) == (mix, per_request, concurrency)), None)


def targets(entry: dict) -> list[tuple[str, str, bool]]:
    """The issue's targets for one model: (what, measured, met)."""
    best = max(row["sentences_per_s"] for row in entry["ceiling"])
    batch1_ms = 1000 / next(row["sentences_per_s"] for row in entry["ceiling"] if row["mode"] == "alone")
    ours = entry["systems"]["textbento"]
    naive = entry["systems"].get("naive-fastapi")
    checks = []
    if (r := _row(ours["rows"], "short", 32, 8)) is not None:
        checks.append(
            ("32 inputs/request, c=8: ≥ 85% of the best ceiling", f"{r['texts_per_s'] / best:.0%}", r["texts_per_s"] >= 0.85 * best)
        )
    if (r := _row(ours["rows"], "short", 1, 64)) is not None:
        checks.append(
            ("1 input/request, c=64: ≥ 55% of the best ceiling", f"{r['texts_per_s'] / best:.0%}", r["texts_per_s"] >= 0.55 * best)
        )
        if naive and (n := _row(naive["rows"], "short", 1, 64)):
            ratio = r["texts_per_s"] / max(n["texts_per_s"], 1e-9)
            checks.append(("1 input/request, c=64: ≥ 4× naive FastAPI", f"{ratio:.1f}×", ratio >= 4))
    if (r := _row(ours["rows"], "short", 1, 1)) is not None:
        checks.append((f"c=1 p50 ≤ batch-1 latency {batch1_ms:.1f} ms + 3 ms", f"{r['p50_ms']:.1f} ms", r["p50_ms"] <= batch1_ms + 3))
    errors = sum(r["errors"] for r in ours["rows"])
    checks.append(("zero errors at every concurrency ≤ 256", str(errors), errors == 0))
    checks.append(("all processes ≤ 1.5 GiB RSS", f"{ours['peak_rss_mib']:.0f} MiB", ours["peak_rss_mib"] <= 1536))
    return checks


def markdown(report: dict) -> str:
    lines = [f"# Benchmark (backend: {report['backend']})", ""]
    for task, entry in report["models"].items():
        lines += [
            f"## {task}: `{entry['tag']}`",
            "",
            f"In-process ceiling of `{entry['backend']}` per way of batching (bench/ceiling.py):",
            "",
        ]
        lines += ["| batching | sentences/s |", "|---|---:|"] + [f"| {r['mode']} | {r['sentences_per_s']:.0f} |" for r in entry["ceiling"]]
        lines += [
            "",
            "| system | mix | texts/req | conc. | req/s | texts/s | p50 ms | p95 ms | p99 ms | errors |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, system in entry["systems"].items():
            for r in system["rows"]:
                lines.append(
                    f"| {name} | {r['mix']} | {r['texts_per_request']} | {r['concurrency']} | {r['requests_per_s']} | {r['texts_per_s']} "
                    f"| {r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | {r['errors']} |"
                )
        lines += [
            "",
            "Peak RSS of all processes: " + ", ".join(f"{n} {s['peak_rss_mib']:.0f} MiB" for n, s in entry["systems"].items()),
            "",
        ]
        if "textbento" in entry["systems"]:
            lines += ["| target | measured | met |", "|---|---|---|"] + [
                f"| {what} | {got} | {'yes' if ok else '**no**'} |" for what, got, ok in targets(entry)
            ]
        lines.append("")
    return "\n".join(lines)


def plots(report: dict, directory: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for task, entry in report["models"].items():
        figure, (throughput, latency) = plt.subplots(1, 2, figsize=(12, 4.5))
        for name, system in entry["systems"].items():
            rows = [r for r in system["rows"] if r["mix"] == "short" and r["texts_per_request"] == 1]
            throughput.plot([r["concurrency"] for r in rows], [r["texts_per_s"] for r in rows], marker="o", label=name)
            latency.plot([r["concurrency"] for r in rows], [r["p99_ms"] for r in rows], marker="o", label=name)
        best = max(r["sentences_per_s"] for r in entry["ceiling"])
        throughput.axhline(best, linestyle="--", color="grey", label="in-process ceiling (best batching)")
        for axis, title in ((throughput, "texts/s"), (latency, "p99 latency, ms")):
            axis.set_xscale("log", base=2)
            axis.set_xlabel("concurrency (1 short text per request)")
            axis.set_title(f"{task}: {title}")
            axis.legend(fontsize=8)
        latency.set_yscale("log")
        figure.tight_layout()
        figure.savefig(directory / f"{task}.png", dpi=100)
        plt.close(figure)


def write_report(report: dict, directory: Path) -> None:
    (directory / "bench.md").write_text(markdown(report))
    plots(report, directory)
