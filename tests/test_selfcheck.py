"""The start-up self-check and the int8 graph for CPUs without VNNI: ``auto`` serves only what passes here.

The CPU class of the machine running these tests decides which int8 kernels run (``models.cpu``);
the tests hold for every class: the check passes the stored int8 graph where its kernels are
exact, the u8×u8 graph passes the gates on every x86 class, and a damaged graph falls back to fp32.
Sparse weights are also held to the flip gate, which sees what the cosines do not
(``tests/test_sparse.py`` runs it through ``auto``).
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import bentoml
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import models.backends
from models import cpu
from models.backends import chosen, load_backend, onnx_backend, self_checked
from models.inference import run_batch
from models.onnx_layout import FP32, INT8, onnx_dir
from models.selfcheck import MAX_FLIPPED_MASS, MEAN_COSINE, MIN_COSINE, Fidelity, agreement, probe_ids, self_check
from models.spec import ModelSpec
from tests.reference import backend_outputs
from tests.test_onnx import TEXTS, cosines, outputs


def model_copy(tag: str, directory: Path) -> tuple[Path, ModelSpec]:
    stored = bentoml.models.get(tag)
    shutil.copytree(stored.path, directory)
    return directory, ModelSpec.of(stored)


def damage(graph: Path, matmuls: int = 3) -> None:
    """Scales of the first ``matmuls`` int8 weight matrices scrambled (×0.2-5 per output channel)."""
    model = onnx.load(str(graph))
    rng = np.random.default_rng(0)
    scales = [init for init in model.graph.initializer if init.name.endswith("_int8_w_scale")][:matmuls]
    assert len(scales) == matmuls
    for init in scales:
        values = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array((values * np.exp(rng.uniform(-1.6, 1.6, values.shape))).astype(np.float32), init.name))
    onnx.save(model, str(graph))


@pytest.mark.int8
def test_the_int8_graph_passes_the_check_here(embed_tag: str):
    stored = bentoml.models.get(embed_tag)
    _, (int8, *_), _ = self_checked(stored.path, ModelSpec.of(stored), 2)
    assert (int8.name, int8.fidelity.passed) == ("onnx-int8", True), int8.fidelity
    assert int8.fidelity.min_cosine >= MIN_COSINE and int8.fidelity.mean_cosine >= MEAN_COSINE
    assert int8.precision == (onnx_backend.SIGNED if cpu.signed_int8_is_exact() else onnx_backend.UNSIGNED)


@pytest.mark.int8
def test_a_damaged_int8_graph_is_caught_and_never_served(embed_tag: str, tmp_path: Path, caplog, monkeypatch):
    """The stored int8 graph misses the gates: the one built from the fp32 graph with Q/K/V in fp32 is
    checked next and served where it passes (batch invariant as the stored one); where it misses too, fp32."""
    directory, spec = model_copy(embed_tag, tmp_path / "damaged")
    damage(onnx_dir(directory) / INT8)
    monkeypatch.setattr(models.backends, "has_amx_bf16", lambda: False)  # the int8 graphs the only candidates
    # Each candidate twice fp32's speed: which passes the gates decides here, not this CPU's int8 kernels.
    monkeypatch.setattr(models.backends, "texts_per_s", lambda backends, spec, probe: [100.0] + [200.0] * (len(backends) - 1))
    with caplog.at_level(logging.WARNING, logger="textbento"):
        backend = load_backend("auto", directory, spec, 2)
    kernels = onnx_backend.SIGNED if cpu.signed_int8_is_exact() else onnx_backend.UNSIGNED
    assert (backend.name, backend.precision, backend.fidelity.passed) == ("onnx-int8", f"{kernels}, Q/K/V fp32", True), backend.fidelity
    damaged = next(trial for trial in backend.trials if trial.precision == onnx_backend.UNSIGNED)  # the last stored one tried
    assert not damaged.fidelity.passed and damaged.fidelity.min_cosine < MIN_COSINE and not damaged.served
    lines = [record.getMessage() for record in caplog.records if "misses the accuracy gates" in record.getMessage()]
    assert len(lines) == (2 if cpu.signed_int8_is_exact() else 1)  # u8×s8, then u8×u8: the same damaged weights
    assert cpu.describe() in lines[-1] and "not a candidate" in lines[-1]
    ids = list(probe_ids(directory, spec)[:24])
    alone = [run_batch(backend, [one], spec.pad_id, 4096)[0] for one in ids]
    assert np.abs(np.stack(alone) - np.stack(run_batch(backend, ids, spec.pad_id, 4096))).max() <= 1e-6
    # Where the built one misses too, fp32, and the warning says so.
    check = models.backends.self_check
    monkeypatch.setattr(
        models.backends, "self_check", lambda *args: Fidelity(0.9, 0.95, 8, 0.0) if "Q/K/V" in args[0].precision else check(*args)
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="textbento"):
        backend = load_backend("auto", directory, spec, 2)
    assert (backend.name, backend.precision, backend.fidelity.passed) == ("onnx", "fp32", False), backend.fidelity
    lines = [record.getMessage() for record in caplog.records if "misses the accuracy gates" in record.getMessage()]
    assert "Q/K/V fp32" in lines[-1] and "serving fp32" in lines[-1]
    # Asked for by name, the damaged graph is served as it is: the check belongs to ``auto``.
    assert load_backend("onnx-int8", directory, spec, 2).fidelity is None


@pytest.mark.int8  # a passing int8 graph: its kernels by the CPU class
@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="OpenVINO is not installed")
def test_openvino_is_weighed_only_where_the_int8_graph_misses(embed_tag: str, tmp_path: Path, monkeypatch):
    """On a CPU with AMX (said so here, on any CPU): beside an int8 graph that passes, OpenVINO is not loaded,
    sparing its start-up and the memory it keeps; where the int8 graphs miss, its bf16 is weighed beside them."""
    monkeypatch.setattr(models.backends, "has_amx_bf16", lambda: True)
    stored = bentoml.models.get(embed_tag)
    _, candidates, _ = self_checked(stored.path, ModelSpec.of(stored), 2)
    assert [candidate.name for candidate in candidates] == ["onnx-int8"]
    directory, spec = model_copy(embed_tag, tmp_path / "damaged")
    damage(onnx_dir(directory) / INT8)
    _, candidates, _ = self_checked(directory, spec, 2)
    assert [candidate.name for candidate in candidates] == ["onnx-int8", "onnx-int8", "openvino"]
    assert candidates[-1].fidelity.passed, candidates[-1].fidelity


class Timed:
    """A candidate for ``chosen``: its name, whether it passed the check, and how fast it runs."""

    def __init__(self, name: str, passed: bool, texts_per_s: float) -> None:
        self.name, self.precision, self.device, self.texts_per_s, self.trials = name, name, "cpu", texts_per_s, ()
        self.fidelity = Fidelity(1.0 if passed else 0.5, 1.0 if passed else 0.5, 32, 0.0)


@pytest.mark.parametrize(
    "fp32, int8, bf16, served",
    [
        (300, 600, 650, "int8"),  # the default, unless another runs MARGIN times its texts/s
        (300, 320, 0, "fp32"),  # int8 under INEXACT_GAIN times fp32's texts/s: exact fp32 instead
        (300, 340, 0, "int8"),
        (300, 320, 420, "bf16"),  # fp32 the default, bf16 MARGIN times it
        (300, 600, 800, "bf16"),
        (300, 0, 800, "bf16"),  # int8 missed the gates: the next that passed is the default
        (800, 600, 100, "fp32"),  # a tiny model: quantizing costs more than it saves
        (300, 0, 0, "fp32"),  # nothing passed
        (300, 600, 10_000, "int8"),  # the fastest missed the gates: never served
    ],
)
def test_auto_serves_the_fastest_that_passed_with_a_margin_for_the_default(fp32, int8, bf16, served, monkeypatch):
    """``0`` texts/s: missed the gates (bf16 10,000: a fast candidate that missed them)."""
    monkeypatch.setattr(models.backends, "texts_per_s", lambda backends, spec, probe: [backend.texts_per_s for backend in backends])
    reference = Timed("fp32", True, fp32)
    candidates = [Timed("int8", bool(int8), int8), Timed("bf16", bf16 not in (0, 10_000), bf16)]
    backend = chosen(reference, candidates, ModelSpec(task="embed", max_length=16), [])
    assert backend.name == served
    trials = {trial.backend: trial for trial in backend.trials}
    assert [trial.served for trial in backend.trials] == [name == served for name in ("fp32", "int8", "bf16")]
    assert trials["fp32"].fidelity is None and all(
        trials[name].texts_per_s is None for name in trials if trials[name].fidelity and not trials[name].fidelity.passed
    )


def test_when_the_flags_promise_exact_u8s8_kernels_but_the_check_fails_uint8_weights_are_tried(embed_tag: str, monkeypatch):
    """Flags that promise VNNI on a CPU whose kernels saturate (as /proc/cpuinfo does under qemu-user,
    which is why ``models.cpu`` asks cpuid: bench/results/cpu-classes.json, min cosine 0.873) cost
    no accuracy: the check catches it. Here the u8×s8 check is made to fail."""
    check = models.backends.self_check

    def saturating(candidate, *args):
        figures = check(candidate, *args)
        return Fidelity(0.873, 0.968, figures.probe_texts, figures.seconds) if candidate.precision == onnx_backend.SIGNED else figures

    monkeypatch.setattr(onnx_backend, "signed_int8_is_exact", lambda: True)
    monkeypatch.setattr(models.backends, "self_check", saturating)
    stored = bentoml.models.get(embed_tag)
    _, (int8, *_), _ = self_checked(stored.path, ModelSpec.of(stored), 2)
    assert (int8.name, int8.precision, int8.fidelity.passed) == ("onnx-int8", onnx_backend.UNSIGNED, True)


@pytest.mark.int8
def test_unsigned_weights_compute_the_same_int8_arithmetic(embed_tag: str, monkeypatch):
    """The u8×u8 graph (what a CPU without VNNI serves) passes the gates against fp32 here, and on a
    CPU whose u8×s8 kernels are exact it equals the stored graph: the same integers, multiplied."""
    monkeypatch.setattr(onnx_backend, "signed_int8_is_exact", lambda: False)
    unsigned = backend_outputs(embed_tag, "onnx-int8", TEXTS)  # not through the cache, which keeps the served graph's rows
    monkeypatch.undo()
    cosine = cosines(unsigned, outputs(embed_tag, "onnx"))
    assert cosine.min() >= MIN_COSINE and cosine.mean() >= MEAN_COSINE, (cosine.min(), cosine.mean(), TEXTS[int(cosine.argmin())])
    if cpu.signed_int8_is_exact():
        assert cosines(unsigned, outputs(embed_tag, "onnx-int8")).min() >= 0.999999


def test_agreement_of_classifier_logits():
    spec = ModelSpec(task="classify", max_length=16, labels=("a", "b"))
    logits = np.array([[1.0, -1.0], [0.2, 0.4], [3.0, 3.0]])
    assert np.allclose(agreement(logits + 5.0, logits, spec), 1.0)  # a shift per text changes no softmax
    assert agreement(logits[:, ::-1], logits, spec)[0] == pytest.approx(-1.0)  # the label flipped
    reranker = ModelSpec(task="classify", max_length=16, labels=("relevant",), activation="sigmoid")
    column = np.array([[0.5], [2.0], [-1.0]])
    assert agreement(2 * column + 1, column, reranker) == pytest.approx([1.0])  # the same order and spacing
    assert agreement(-column, column, reranker) == pytest.approx([-1.0])


def drop_small_weights(rows: np.ndarray, share: float) -> np.ndarray:
    """``rows`` with, per row, its smallest non-zero weights holding ``share`` of its L1 mass set to zero."""
    dropped = rows.copy()
    for row in dropped:
        # stable: equal weights in the same order on every CPU (the default sort's SIMD kernels differ by class)
        order = np.argsort(np.where(row != 0, np.abs(row), np.inf), kind="stable")
        below = np.cumsum(np.abs(row[order])) <= share * np.abs(row).sum()
        row[order[below]] = 0
    return dropped


class FixedRows:
    """A backend whose answer for the one-token text ``[i]`` is ``rows[i]``: the check without a graph."""

    name, device, precision, fidelity = "fixed", "cpu", "int8", None

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return self.rows[input_ids[:, 0]]


def test_sparse_weights_dropped_near_zero_pass_the_cosines_but_not_the_flip_gate():
    """SPLADE rows with ~1% of 30,522 ids non-zero, as a trained model's; a candidate that drops the
    small weights holding 2% of each text's mass is nearly parallel to them, and must not be served."""
    rng = np.random.default_rng(0)
    reference = np.log1p(np.maximum(rng.normal(-2.3, 1.0, (32, 30522)), 0)).astype(np.float32)
    probe = [np.array([text]) for text in range(len(reference))]
    sparse = ModelSpec(task="sparse", max_length=16, dimensions=reference.shape[1])
    dropped = self_check(FixedRows(drop_small_weights(reference, 0.02)), FixedRows(reference), sparse, probe)
    assert dropped.min_cosine >= MIN_COSINE and dropped.mean_cosine >= MEAN_COSINE, dropped
    assert MAX_FLIPPED_MASS < dropped.max_flipped_mass <= 0.02 and not dropped.passed, dropped
    assert dropped.as_dict()["gates"]["max_flipped_mass"] == MAX_FLIPPED_MASS
    assert self_check(FixedRows(reference * 1.01), FixedRows(reference), sparse, probe).passed  # rescaled: nothing flipped
    dense = ModelSpec(task="embed", max_length=16, dimensions=reference.shape[1])
    assert self_check(FixedRows(reference), FixedRows(reference), dense, probe).max_flipped_mass is None  # dense: no flip gate


RESIDENT_AFTER_LOAD = """
import sys
from models.backends import load_backend
from models.spec import ModelSpec
import bentoml
stored = bentoml.models.get(sys.argv[1])
backend = load_backend(sys.argv[2], stored.path, ModelSpec.of(stored), 2)
print(int(open("/proc/self/statm").read().split()[1]) * 4096, backend.name)
"""


@pytest.mark.slow  # fresh interpreters
@pytest.mark.skipif(not Path("/proc/self/statm").is_file(), reason="reads Linux's /proc")
def test_the_self_check_leaves_no_memory_behind(embed_tag: str):
    """``auto`` holds the memory of what it serves served by name: the graph it did not choose (fp32, or the
    int8 one where fp32 serves), and the trial runs, are handed back to the system (without it: +131 MiB for
    MiniLM serving int8)."""
    command = [sys.executable, "-c", RESIDENT_AFTER_LOAD, embed_tag]

    def resident(backend: str) -> tuple[int, str]:
        size, name = subprocess.run([*command, backend], capture_output=True, text=True, check=True).stdout.split()
        return int(size), name

    after_auto, served = resident("auto")
    by_name, _ = resident(served)
    fp32_graph = (onnx_dir(bentoml.models.get(embed_tag).path) / FP32).stat().st_size
    assert after_auto - by_name < fp32_graph / 2, (served, after_auto, by_name)
