"""The reliability runs' section of docs/performance.md (``make report``), from their result files."""

from __future__ import annotations

from harness.results import n, table


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
