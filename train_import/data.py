"""The user's training data: CSV or JSONL rows read, checked, split; every problem is one ``BadData`` line.

Nothing is trained or stored until the data passed every check here.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import random
from collections import Counter, defaultdict
from pathlib import Path


class BadData(ValueError):
    """Data the command cannot train on; the message says what and where."""


def read_rows(path: Path, columns: list[str]) -> list[dict[str, str]]:
    """The rows of a ``.csv`` (header row) or ``.jsonl``/``.json`` (one object per line) file, with ``columns``."""
    if not path.is_file():
        raise BadData(f"no such file: {path}")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise BadData(f"{path} is not UTF-8 text (byte {error.start})") from None
    if path.suffix.lower() in (".jsonl", ".json"):
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise BadData(f"{path} line {number} is not JSON: {error.msg}") from None
                if not isinstance(row, dict):
                    raise BadData(f"{path} line {number} is not a JSON object")
                rows.append(row)
    else:
        rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise BadData(f"{path} has no rows")
    for column in columns:
        if column not in rows[0]:
            raise BadData(f"{path} has no column {column!r} (it has: {', '.join(map(str, rows[0]))})")
    checked = []
    for number, row in enumerate(rows, start=1):
        values = {column: row.get(column) for column in columns}
        for column, value in values.items():
            if not isinstance(value, (str, int)) or not str(value).strip():
                raise BadData(f"{path} row {number}: {column!r} is empty")
        checked.append({column: str(value).strip() for column, value in values.items()})
    return checked


def sha256(*paths: Path | None) -> str:
    """One hash of the data files, in order: what the stored model was trained on."""
    digest = hashlib.sha256()
    for path in paths:
        if path is not None:
            digest.update(path.read_bytes())
    return digest.hexdigest()


def check_labels(train: list[str], evaluation: list[str] | None, source: Path) -> list[str]:
    """The sorted label set; refuses fewer than two labels, a label with one example, eval labels unseen in training."""
    counts = Counter(train)
    if len(counts) < 2:
        raise BadData(f"{source} has {len(counts)} label ({', '.join(map(repr, counts))}); a classifier needs at least two")
    single = sorted(label for label, count in counts.items() if count < 2)
    if single:
        raise BadData(f"{source}: label {single[0]!r} has one example; every label needs at least two")
    unseen = sorted(set(evaluation or []) - set(counts))
    if unseen:
        raise BadData(f"the evaluation data has labels the training data has not: {', '.join(map(repr, unseen))}")
    return sorted(counts)


def stratified_split(labels: list[str], share: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, eval) indices: ``share`` of each label held out, at least one, never all of a label."""
    by_label: dict[str, list[int]] = defaultdict(list)
    for index, label in enumerate(labels):
        by_label[label].append(index)
    rng = random.Random(seed)
    train, held_out = [], []
    for indices in by_label.values():
        rng.shuffle(indices)
        cut = min(len(indices) - 1, max(1, round(len(indices) * share)))
        held_out += indices[:cut]
        train += indices[cut:]
    return sorted(train), sorted(held_out)
