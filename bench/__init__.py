"""Benchmark and load tooling: the harness (``serving``, ``load``, ``texts``, ``testmodels``, ``report``,
``baselines``, ``write_result``), shared by the make targets' modules beside it, the integration tests
and the one-off studies (``bench.studies``)."""

import json
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def write_result(path: str | Path, report: dict, indent: int = 2) -> Path:
    """A result file: ``report`` with the CPU it was measured on and the date (a figure is a fact about
    its machine and day). A bare file name lands in ``bench/results/``."""
    from datetime import date

    from models.cpu import cpu

    path = Path(path) if Path(path).parent != Path(".") else RESULTS / path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {**(report if isinstance(report, dict) else {"results": report}), "cpu": cpu(), "date": date.today().isoformat()}, indent=indent
        )
        + "\n"
    )
    return path
