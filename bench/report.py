"""bench.json → bench.md (the baselines' section of docs/performance.md, with the target checks) and PNG plots."""

from __future__ import annotations

from pathlib import Path

from bench.performance import baselines


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
    (directory / "bench.md").write_text("\n".join([f"# Benchmark (backend: {report['backend']})", "", *baselines({"bench.json": report})]))
    plots(report, directory)
