"""The CPU image, built and run: `make image-test` (minutes; not part of `make test`).

Builds one image per test model with deploy/image/build.sh (bentoml build + bentoml containerize,
buildah and a Debian-made base where no Docker engine is), runs each with podman, waits for
/readyz, checks the answers against the same backend run in process, then stops and removes it.
Prints each image's size, build time and cold start (container start to /readyz 200).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import requests

from bench.serving import free_port
from tests.reference import TEXTS, backend_outputs

pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(not (shutil.which("docker") or shutil.which("buildah")), reason="needs docker, or buildah and podman"),
]
ROOT = Path(__file__).resolve().parent.parent
# What runs here without a Docker engine: runc (crun fails on hybrid cgroups), the host network
# (no CNI plugins), and the highest ulimits this VM grants.
PODMAN = ["podman", "--runtime", "runc"]
DOCKER = bool(shutil.which("docker")) and subprocess.run(["docker", "info"], capture_output=True).returncode == 0
ENGINE = ["docker"] if DOCKER else PODMAN
if not DOCKER:  # podman must read the storage buildah builds into (deploy/image/env.sh)
    os.environ.setdefault("CONTAINERS_STORAGE_CONF", str(ROOT / "deploy/image/storage.conf"))
RUN_OPTIONS = ["--network", "host", "--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
# Issue 22: the CPU image of the embedded MiniLM was 1,471 MB before deploy/image/slim.sh; past this,
# something serving does not use has come back (build tools, a cache, weights the CPU never reads).
MAX_CPU_IMAGE_MB = 600


MEASURED: dict[str, dict] = {}  # per image: size, build time, cold start → bench/results/image-test.json


def build(tag: str, image: str) -> str:
    """Builds the CPU image of the stored model ``tag``; build.sh's summary line."""
    result = subprocess.run(
        [str(ROOT / "deploy/image/build.sh"), "cpu"],
        cwd=ROOT,
        env={**os.environ, "MODEL": tag, "IMAGE": image, "BENTOML": str(Path(sys.executable).with_name("bentoml"))},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    summary = result.stdout.strip().splitlines()[-1]
    size_mb, build_s = re.search(r": (\d+) MB, built in (\d+) s", summary).groups()
    MEASURED[image] = {"model": tag, "size_mb": int(size_mb), "build_s": int(build_s)}
    return summary


@contextmanager
def running(image: str):
    """The image running with its port on 127.0.0.1; yields (base url, seconds to /readyz 200)."""
    port = free_port()
    network = ["-p", f"127.0.0.1:{port}:{port}"] if DOCKER else RUN_OPTIONS
    started = time.monotonic()
    container = subprocess.run(
        [*ENGINE, "run", "-d", *network, "-e", f"PORT={port}", image], capture_output=True, text=True, check=True
    ).stdout.strip()
    url = f"http://127.0.0.1:{port}"
    try:
        while time.monotonic() - started < 300:
            try:
                if requests.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):  # not listening yet, or starting too slowly to answer
                pass
            time.sleep(0.25)
        else:
            logs = subprocess.run([*ENGINE, "logs", container], capture_output=True, text=True).stdout
            pytest.fail(f"{image} not ready after 300 s:\n{logs[-3000:]}")
        MEASURED.setdefault(image, {})["cold_start_s"] = round(time.monotonic() - started, 1)
        yield url, time.monotonic() - started
    finally:
        subprocess.run([*ENGINE, "stop", "-t", "30", container], capture_output=True)
        subprocess.run([*ENGINE, "rm", "-f", container], capture_output=True)


@pytest.fixture(scope="module")
def images(embed_tag: str, classify_tag: str):
    built = {"embed": ("textbento-test-embed:cpu", embed_tag), "classify": ("textbento-test-classify:cpu", classify_tag)}
    for image, tag in built.values():
        print("\n" + build(tag, image))
    yield {task: image for task, (image, _) in built.items()}
    report = {"command": "make image-test", "date": time.strftime("%Y-%m-%d"), "images": MEASURED}
    (ROOT / "bench" / "results" / "image-test.json").write_text(json.dumps(report, indent=1) + "\n")


def test_the_cpu_image_carries_no_pytorch(images):
    probe = "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('onnxruntime') is not None)"
    result = subprocess.run(
        [*ENGINE, "run", "--rm", *RUN_OPTIONS, "--entrypoint", "python", images["embed"], "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.split() == ["None", "True"], result.stderr[-2000:]


def test_the_cpu_images_stay_small(images):
    sizes = {image: MEASURED[image]["size_mb"] for image in images.values()}
    assert all(size <= MAX_CPU_IMAGE_MB for size in sizes.values()), sizes


def test_the_cpu_image_holds_only_what_serving_uses(images):
    """No build tools or uv (BentoML's Dockerfile installs them), no weights the CPU backends never read;
    the two graphs that backend auto on CPU loads are there."""
    probe = (
        "import glob, os, shutil; m = os.environ['BENTO_PATH'] + '/models/**/';"
        " print([t for t in ('gcc', 'make', 'git', 'gpg', 'uv') if shutil.which(t)],"
        " [os.path.basename(f) for p in ('*.safetensors', '*.bin', 'model-fp16.onnx*') for f in glob.glob(m + p, recursive=True)],"
        " sorted(os.path.basename(f) for f in glob.glob(m + 'onnx/*.onnx', recursive=True)))"
    )
    result = subprocess.run(
        [*ENGINE, "run", "--rm", *RUN_OPTIONS, "--entrypoint", "python", images["embed"], "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.stdout.strip() == "[] [] ['model-int8.onnx', 'model.onnx']", (result.stdout, result.stderr[-2000:])


def test_the_embeddings_image_answers_like_its_backend(images, embed_tag):
    with running(images["embed"]) as (url, cold_start_s):
        print(f"\n{images['embed']}: /readyz 200 after {cold_start_s:.1f} s")
        (card,) = requests.get(f"{url}/v1/models", timeout=10).json()["data"]
        assert (card["tag"], card["backend"], card["device"]) == (embed_tag, "onnx-int8", "cpu")
        response = requests.post(f"{url}/v1/embeddings", json={"input": TEXTS}, timeout=60)
        assert response.status_code == 200, response.text
        served = np.array([item["embedding"] for item in response.json()["data"]])
        assert np.allclose(served, backend_outputs(embed_tag, "onnx-int8", TEXTS), atol=1e-5)
        wrong = requests.post(f"{url}/v1/classify", json={"inputs": "hello"}, timeout=10)
        assert wrong.status_code == 400 and wrong.json()["error"]["type"] == "wrong_task"


def test_the_classifier_image_answers_like_its_backend(images, classify_tag):
    with running(images["classify"]) as (url, cold_start_s):
        print(f"\n{images['classify']}: /readyz 200 after {cold_start_s:.1f} s")
        response = requests.post(f"{url}/v1/classify", json={"inputs": TEXTS, "top_k": 2}, timeout=60)
        assert response.status_code == 200, response.text
        logits = backend_outputs(classify_tag, "onnx-int8", TEXTS)
        probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        for row, item in zip(probabilities, response.json()["data"]):
            assert np.allclose(sorted(score["score"] for score in item["scores"]), sorted(row), atol=1e-5)
