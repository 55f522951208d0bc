"""Result files: a measurement with the machine and day it was taken on, in ``bench/results/``."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import date
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results"


def commit() -> str | None:
    """The checked-out commit, where this is a git work tree (a figure belongs to the code that made it)."""
    try:
        found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=RESULTS.parent, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found.stdout.strip() or None


def write_result(path: str | Path, report: dict, indent: int = 2) -> Path:
    """A result file: ``report`` with the CPU it was measured on, the date and the commit (a figure is a
    fact about its machine, day and code). A bare file name lands in ``bench/results/``."""
    from models.cpu import cpu

    path = Path(path) if Path(path).parent != Path(".") else RESULTS / path
    path.parent.mkdir(parents=True, exist_ok=True)
    body = report if isinstance(report, dict) else {"results": report}
    stamp = {"cpu": cpu(), "date": date.today().isoformat(), "commit": commit()}
    path.write_text(json.dumps({**body, **stamp}, indent=indent) + "\n")
    return path


# Reading them back, as Markdown (``bench.performance``, ``reliability.report``).


def load(name: str):
    """A result file's data, or None where it is missing."""
    path = RESULTS / name
    return json.loads(path.read_text()) if path.is_file() else None


def cpu_class(data) -> str:
    cpu = data.get("cpu") if isinstance(data, dict) else None
    if cpu:
        return f"{cpu['model']} ({cpu['machine']}; {' '.join(cpu['flags'])})"
    machine = data.get("machine") if isinstance(data, dict) else None
    return machine.get("cpu_class", "not recorded") if isinstance(machine, dict) else "not recorded"


def source(name: str, data) -> str:
    """Where a figure comes from: its file, and the CPU class, date and commit (where recorded) the file records."""
    recorded = data if isinstance(data, dict) else {}
    date, made_by = str(recorded.get("date", ""))[:10], recorded.get("commit") or recorded.get("revision")
    return f"`bench/results/{name}`: CPU {cpu_class(data)}; date {date or 'not recorded'}" + (f"; commit {made_by}." if made_by else ".")


def n(value, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def pct(value) -> str:
    return f"{value:.0%}" if round(value, 2) == value else f"{value:.1%}"


def table(headers: list[str], rows: list[list]) -> list[str]:
    """A Markdown table; a column of numbers is right-aligned."""
    numeric = [all(re.match(r"[-+\d.,–]*(x|%| / [\d.,]+%?)?$", str(row[i])) for row in rows) for i in range(len(headers))]
    align = ["---:" if i and is_number else "---" for i, is_number in enumerate(numeric)]
    return [f"| {' | '.join(headers)} |", f"|{'|'.join(align)}|", *(f"| {' | '.join(str(c) for c in row)} |" for row in rows)]
