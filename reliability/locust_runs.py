"""The shipped locustfile against fresh servers, again and again: does any request get lost?

    python -m reliability.locust_runs [--runs 20] [--users 50] [--spawn-rate 25] [--seconds 30] [--model TAG]

Each run starts its own ``bentoml serve`` (fresh processes, fresh connections between them), runs
Locust headless, and stops the server. A failure is any request the locustfile did not expect
(its deliberate 4xx count as successes). Writes ``bench/results/locust-runs.json`` (per run:
requests, failures, the failure messages, the server log's error lines) and the last run's Locust
CSV summary as ``bench/results/locust_stats.csv``; exit 1 if any run failed.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.results import RESULTS, write_result
from harness.serving import serve

ROOT = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).with_name("locust"))


def run_once(model: str, users: int, spawn_rate: int, seconds: int, work: Path) -> dict:
    log = work / "server.log"
    with serve(env={"TEXTBENTO_MODEL": model}, log_path=log) as server:
        command = [LOCUST, "-f", "locustfile.py", "--headless", "--only-summary", "--host", server.url]
        command += ["-u", str(users), "-r", str(spawn_rate), "-t", f"{seconds}s", "--stop-timeout", "30"]
        command += ["--csv", str(work / "locust")]
        subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120)
    with open(work / "locust_stats.csv", newline="") as stats:
        total = next(row for row in csv.DictReader(stats) if row["Name"] == "Aggregated")
    with open(work / "locust_failures.csv", newline="") as failures:
        failed = [{"name": row["Name"], "error": row["Error"][:300], "count": int(row["Occurrences"])} for row in csv.DictReader(failures)]
    errors = [
        line for line in log.read_text(errors="replace").splitlines() if "[ERROR]" in line or "[WARNING]" in line or "Traceback" in line
    ]
    return {
        "requests": int(total["Request Count"]),
        "failures": int(total["Failure Count"]),
        "failed": failed,
        "server_errors": errors[:20],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--spawn-rate", type=int, default=25)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--model", default="text-model:latest")
    parser.add_argument("--out", default=str(RESULTS / "locust-runs.json"))
    args = parser.parse_args()
    runs, started = [], time.monotonic()
    for index in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="textbento-locust-"))
        result = run_once(args.model, args.users, args.spawn_rate, args.seconds, work)
        runs.append(result)
        eta = (time.monotonic() - started) / (index + 1) * (args.runs - index - 1)
        print(f"run {index + 1}/{args.runs}: {result['requests']} requests, {result['failures']} failures (ETA {eta:.0f} s)", flush=True)
        for failure in result["failed"]:
            print(f"    {failure['count']} × {failure['name']}: {failure['error'][:160]}", flush=True)
        if index == args.runs - 1:
            shutil.copy(work / "locust_stats.csv", Path(args.out).with_name("locust_stats.csv"))
        shutil.rmtree(work, ignore_errors=True)
    summary = {
        "command": " ".join(["python -m reliability.locust_runs", *sys.argv[1:]]),
        "scenario": {"users": args.users, "spawn_rate": args.spawn_rate, "seconds": args.seconds, "model": args.model},
        "runs": len(runs),
        "runs_with_failures": sum(1 for run in runs if run["failures"]),
        "requests": sum(run["requests"] for run in runs),
        "failures": sum(run["failures"] for run in runs),
        "per_run": runs,
    }
    write_result(args.out, summary, indent=1)
    failed_runs, failed_requests = summary["runs_with_failures"], summary["failures"]
    print(f"{failed_runs} of {summary['runs']} runs had failures; {failed_requests} of {summary['requests']} requests failed")
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
