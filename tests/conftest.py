"""Shared fixtures: an isolated BentoML store, the two test models, and real served instances.

The store lives in a temporary BENTOML_HOME set before bentoml is imported anywhere, so tests
never touch the developer's own models; it is removed when the run ends (it holds ~2 GB of
imported models: a run must not leave them behind on a CI disk).
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

os.environ["BENTOML_HOME"] = tempfile.mkdtemp(prefix="textbento-test-home-")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("BENTOML_DO_NOT_TRACK", "true")

import pytest

atexit.register(shutil.rmtree, os.environ["BENTOML_HOME"], ignore_errors=True)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.serving import serve, wait_for_stops  # noqa: E402
from harness.testmodels import build_bert_classifier, build_classifier  # noqa: E402
from serving.compat import openvino_telemetry  # noqa: E402

openvino_telemetry.apply()  # the tests that load OpenVINO in process send nothing either, as the server does

# Fixtures that start a real ``bentoml serve`` (each logs to ``logs``) or import a model into the store.
SLOW_FIXTURES = {
    "logs",
    "embed_tag",
    "classify_tag",
    "cross_encoder_tag",
    "sparse_tag",
    "plain_embed_tag",
    "embed_onnx_tag",
    "topic_classifier_tag",
}


def pytest_collection_modifyitems(items) -> None:
    """Tests that need a slow fixture, directly or through another, are marked ``slow``: ``make test-fast``
    leaves them out. Tests slow in other ways (training, building) carry the mark themselves."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


TIMING_HEADERS = ("x-compute-time", "x-compute-tokens", "x-tokenization-time", "x-queue-time", "x-inference-time")


def check_timing_headers(response) -> dict[str, float]:
    """The TEI timing headers of a 200 answer: present, numbers, the parts within the whole."""
    assert response.status_code == 200, response.text
    values = {name: float(response.headers[name]) for name in TIMING_HEADERS}
    parts = values["x-tokenization-time"] + values["x-queue-time"] + values["x-inference-time"]
    assert all(value >= 0 for value in values.values()) and values["x-compute-tokens"] >= 1
    assert parts <= values["x-compute-time"] + 0.05, values
    return values


async def lone_latencies(url: str, count: int, pause_s: float = 0.0) -> list[float]:
    """Seconds each of ``count`` one-text embeddings requests took, sent one after another."""
    import aiohttp

    latencies = []
    async with aiohttp.ClientSession() as session:
        for i in range(count):
            started = time.monotonic()
            async with session.post(f"{url}/v1/embeddings", json={"input": f"alone {i}"}) as response:
                assert response.status == 200
                await response.read()
            latencies.append(time.monotonic() - started)
            await asyncio.sleep(pause_s)
    return latencies


def assert_chosen_by_auto(card: dict) -> None:
    """The backend a model card names is what ``auto`` must serve here: fp16 ONNX on a CUDA machine; on a
    CPU the default (the first candidate that passed its self-check, per-token int8: the stored graph, else
    the one with Q/K/V in fp32, where it ran at least ``INEXACT_GAIN`` times fp32's texts/s here; else fp32),
    or another that passed and ran at least ``MARGIN`` times its texts/s here, each trial on the card as measured."""
    import onnxruntime
    import torch

    from models.backends import INEXACT_GAIN, MARGIN

    if torch.cuda.is_available() and "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        assert (card["backend"], card["device"]) == ("onnx", "cuda")
        return
    trials = card["trials"]
    (served,) = [trial for trial in trials if trial["served"]]
    assert (card["backend"], card["precision"], card["device"]) == (served["backend"], served["precision"], "cpu")
    weighed = [trial for trial in trials if trial["fidelity"] is None or trial["fidelity"]["passed"]]
    assert served in weighed and all(trial["texts_per_s"] for trial in weighed)
    fp32, *passed = weighed
    default = passed[0] if passed and passed[0]["texts_per_s"] >= INEXACT_GAIN * fp32["texts_per_s"] else fp32
    assert served == default or served["texts_per_s"] >= MARGIN * default["texts_per_s"], trials
    assert max(trial["texts_per_s"] for trial in weighed) < MARGIN * served["texts_per_s"], trials


def run_import(*args: str) -> subprocess.CompletedProcess:
    """The real import CLI, in a subprocess, against the test store."""
    return subprocess.run(
        [sys.executable, "-m", "train_import.import_model", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )


def here(command: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m train_import.<command> <args>``'s ``main``, in this process, its output captured: for models
    that tests train or serve. A subprocess pays 8-10 s for its imports (torch, transformers' model code)
    before it starts; here they are paid once. ``run_import`` runs the import as a command."""
    import importlib
    import io
    from contextlib import redirect_stderr, redirect_stdout

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = importlib.import_module(f"train_import.{command}").main(list(args))
    return subprocess.CompletedProcess([command, *args], code, out.getvalue(), err.getvalue())


def import_here(*args: str) -> subprocess.CompletedProcess:
    return here("import_model", *args)


def eventually_ok(url: str, within_s: float) -> bool:
    """Whether a small embeddings request succeeds within ``within_s`` seconds of retrying."""
    import requests

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if requests.post(f"{url}/v1/embeddings", json={"input": "quick"}, timeout=30).status_code == 200:
                return True
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    return False


@pytest.fixture(scope="session")
def embed_tag() -> str:
    result = run_import("--name", "minilm")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="session")
def classifier_dir(tmp_path_factory) -> Path:
    return build_classifier(tmp_path_factory.mktemp("classifier"))


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory) -> Path:
    """A one-logit BERT cross-encoder (random weights): scored with a sigmoid, read in pairs."""
    return build_bert_classifier(tmp_path_factory.mktemp("cross-encoder"), num_labels=1)


@pytest.fixture(scope="session")
def cross_encoder_tag(cross_encoder_dir: Path) -> str:
    result = import_here("--path", str(cross_encoder_dir), "--name", "cross-encoder")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="session")
def sparse_tag(tmp_path_factory) -> str:
    """A SPLADE sparse encoder (random weights) on a tiny masked LM."""
    from transformers import BertForMaskedLM

    from harness.testmodels import build_splade, build_tiny_bert

    directory = tmp_path_factory.mktemp("splade")
    build_splade(directory / "splade", build_tiny_bert(directory / "mlm", BertForMaskedLM))
    result = import_here("--path", str(directory / "splade"), "--name", "splade")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.fixture(scope="session")
def classify_tag(classifier_dir: Path) -> str:
    result = import_here("--path", str(classifier_dir), "--name", "sst2-test")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


class RunningServer(NamedTuple):
    url: str
    log: Path
    process: subprocess.Popen


@contextmanager
def running(tag: str, logs: Path, name: str, target: str = "service:TextBento", **env: str):
    """A real `bentoml serve` of ``target`` serving ``tag``, with its log file; stopped in the background."""
    log = logs / f"{name}.log"
    with serve(target, env={"TEXTBENTO_MODEL": tag, **env}, log_path=log, stop_in_background=True) as server:
        yield RunningServer(server.url, log, server.process)


@pytest.fixture(scope="session", autouse=True)
def servers_stopped():
    """Every server stopped in the background has exited before the session ends (and the store is removed)."""
    yield
    wait_for_stops()


@pytest.fixture(scope="session")
def logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def embed_server(embed_tag: str, logs: Path):
    with running(embed_tag, logs, "embed") as server:
        yield server


@pytest.fixture(scope="session")
def embed_url(embed_server) -> str:
    return embed_server.url


@pytest.fixture(scope="session")
def several_server(embed_tag: str, cross_encoder_tag: str, classify_tag: str, logs: Path):
    """The embedder, the reranker and the classifier in one server (test_several_models, test_locust). The
    reranker is listed before the classifier: /v1/classify without a model must still pick the classifier."""
    with running(embed_tag, logs, "several", TEXTBENTO_MODELS=f"{embed_tag},{cross_encoder_tag},{classify_tag}") as server:
        yield server


@pytest.fixture(scope="session")
def classify_url(classify_tag: str, logs: Path):
    # The embeddings server runs the default backend (ONNX); this one serves torch, so
    # both runtimes answer real HTTP and the classifier's logits can be held to transformers' own.
    with running(classify_tag, logs, "classify", TEXTBENTO_BACKEND="torch") as server:
        yield server.url
