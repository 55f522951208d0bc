"""`bentoml build` with bentofile.yaml, from the test model: what the bento holds, and that the image's
layout, where BentoML's model store ``models/`` sits beside our code, still imports our ``models``."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BENTOML = str(Path(sys.executable).with_name("bentoml"))
# What the image's worker processes do first: import the bento's service from its root folder.
LOAD_LIKE_THE_IMAGE = """
import sys, bentoml
service = bentoml.load(".")
print(sys.modules["models"].__file__)
print(service.models[0].stored.path)
"""


def bentoml(*args: str, **env: str) -> str:
    result = subprocess.run([BENTOML, *args], cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def bento(embed_tag: str, tmp_path_factory) -> Path:
    """The bento, exported and unpacked: the tree ``bentoml containerize`` copies into the image (the
    stored bento only refers to its models; export and containerize copy them into ``models/``)."""
    tag = bentoml("build", "--arg", f"model={embed_tag}", "-o", "tag").splitlines()[-1].removeprefix("__tag__:")
    folder = tmp_path_factory.mktemp("bento")
    bentoml("export", tag, str(folder / "bento.tar"))  # plain tar: seconds, where .bento (gzip) takes a minute
    with tarfile.open(folder / "bento.tar") as archive:
        archive.extractall(folder / "root", filter="data")
    return folder / "root"


@pytest.fixture(scope="module")
def info(bento: Path) -> dict:
    return yaml.safe_load((bento / "bento.yaml").read_text())


def test_the_code_is_the_service_and_its_packages_only(bento):
    ours = [ROOT / "service.py", *ROOT.glob("api/**/*.py"), *ROOT.glob("models/**/*.py"), *ROOT.glob("serving/**/*.py")]
    assert {p.relative_to(bento / "src") for p in (bento / "src").rglob("*.py")} == {p.relative_to(ROOT) for p in ours}


def test_both_services_use_the_model_it_was_built_with(bento, info, embed_tag):
    models = {service["name"]: [model["tag"] for model in service["models"]] for service in info["services"]}
    assert models == {"textbento": [embed_tag], "encoder": [embed_tag]}
    name, version = embed_tag.split(":")
    assert (bento / "models" / name / version / "model.yaml").is_file()


def pins(path: Path) -> set[str]:
    """The requirement lines of a file (its ``-r`` includes left out)."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line and not line.startswith("-")}


def test_requirements_are_our_serving_pins_without_torch(bento, info):
    """The CPU image serves with ONNX Runtime: no PyTorch (a CUDA build from PyPI), no transformers, no pyspark (bulk jobs only)."""
    requirements = pins(bento / "env/python/requirements.txt")
    assert pins(ROOT / "requirements/serve-cpu.txt") <= requirements and "onnxruntime==1.31.1" in requirements
    assert not {line for line in requirements if line.startswith(("torch", "transformers", "onnxruntime-gpu", "pyspark", "pandas"))}
    assert info["image"]["python_version"] == "3.11"


CUDA_RUNTIMES = {
    "onnxruntime-gpu==1.31.1",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cublas==13.1.1.3",
    "nvidia-curand==10.4.0.35",
    "nvidia-cuda-nvrtc==13.0.88",
    "nvidia-cudnn-cu13==9.20.0.48",
}


def test_the_flat_requirement_files_agree():
    """serve-gpu.txt is serve-cpu.txt with ONNX Runtime's CUDA build and the CUDA libraries it links,
    no PyTorch; serve-gpu-torch.txt adds torch pinned as for development."""
    cpu, gpu, gpu_torch, development = (
        pins(ROOT / "requirements" / name) for name in ("serve-cpu.txt", "serve-gpu.txt", "serve-gpu-torch.txt", "../requirements.txt")
    )
    assert gpu - cpu == CUDA_RUNTIMES and cpu - gpu == {"onnxruntime==1.31.1"}
    assert gpu_torch - gpu == {line for line in development if line.startswith(("torch", "transformers", "safetensors"))}
    assert gpu <= gpu_torch


@pytest.mark.parametrize("flavour", ["gpu", "gpu-torch"])
def test_a_gpu_bentofile_is_the_cpu_one_with_its_own_requirements(flavour):
    cpu, gpu = (yaml.safe_load((ROOT / path).read_text()) for path in ("bentofile.yaml", f"deploy/{flavour}/bentofile.yaml"))
    assert gpu["python"] == {**cpu["python"], "requirements_txt": f"./requirements/serve-{flavour}.txt"}
    assert (gpu["name"], gpu["labels"]) == (f"textbento-{flavour}", {**cpu["labels"], "flavour": flavour})
    assert {key: value for key, value in gpu.items() if key not in {"python", "name", "labels"}} == {
        key: value for key, value in cpu.items() if key not in {"python", "name", "labels"}
    }


def test_the_gpu_torch_bento_adds_cuda_runtimes_and_torch(embed_tag):
    """Built, as the largest GPU bento (the other differs from it only by its requirements file, above)."""
    tag = bentoml("build", "-f", "deploy/gpu-torch/bentofile.yaml", "--arg", f"model={embed_tag}", "-o", "tag").splitlines()[-1]
    path = Path(bentoml("get", tag.removeprefix("__tag__:"), "-o", "path").strip())
    requirements = pins(path / "env/python/requirements.txt")
    assert pins(ROOT / "requirements/serve-gpu-torch.txt") <= requirements and requirements >= CUDA_RUNTIMES
    assert not any(line.startswith("onnxruntime==") for line in requirements)
    assert any(line.startswith("torch==") for line in requirements)


def test_the_bento_records_its_model_and_stays_offline(info, embed_tag):
    assert info["args"] == {"model": embed_tag}
    assert {e["name"]: e["value"] for e in info["envs"]} == {"HF_HUB_OFFLINE": "1"}


def test_the_image_layout_imports_our_models_package_and_the_bundled_model(bento, embed_tag, tmp_path):
    """From the bento's root, as in the image, with an empty BENTOML_HOME: the model can only come from
    the bento's ``models/`` store, and ``models`` must still be our package in ``src/``."""
    env = {key: value for key, value in os.environ.items() if key != "TEXTBENTO_MODEL"}
    env["BENTOML_HOME"] = str(tmp_path)  # no TEXTBENTO_MODEL either: the bento's own argument decides
    command = [sys.executable, "-c", LOAD_LIKE_THE_IMAGE]
    result = subprocess.run(command, cwd=bento, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    package, model = result.stdout.splitlines()[-2:]
    assert Path(package) == bento / "src" / "models" / "__init__.py"
    assert Path(model) == bento / "models" / Path(*embed_tag.split(":"))
