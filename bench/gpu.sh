#!/usr/bin/env bash
# `make bench-gpu`: the GPU numbers, once, on a fresh CUDA machine (nvidia-smi, Python 3.11, PyPI).
#
#   1. the GPU, from nvidia-smi
#   2. .venv as `make venv` makes it, then the GPU runtimes as README.md describes: onnxruntime out,
#      requirements/serve-gpu.txt in (onnxruntime-gpu with its CUDA/cuDNN wheels; torch==2.13.0 is
#      PyPI's CUDA build on Linux, no other index)
#   3. the embedded all-MiniLM-L6-v2 imported as bench-minilm into a fresh BENTOML_HOME
#   4. python -m bench.gpu: in-process ceilings and served points → bench/results/gpu-<GPU name>.json
#
# Prints each step's time; exits non-zero on any failure. An existing .venv is reused and gets the
# GPU runtimes (`make clean venv` restores the CPU one).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=.venv/bin
PIP=("$BIN/pip" install -q --disable-pip-version-check)
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
started=$SECONDS
step=""
step_started=$SECONDS

begin() {  # ends the step before, if any, with its time; starts the next
    [ -z "$step" ] || echo "== $step: done in $((SECONDS - step_started)) s"
    step=$1
    step_started=$SECONDS
    echo "== $step"
}
trap 'rc=$?; [ "$rc" -eq 0 ] || echo "== FAILED (exit $rc) in: $step, after $((SECONDS - step_started)) s" >&2' EXIT

begin "1. GPU"
smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)
echo "$smi"
gpu=${smi%%$'\n'*}  # the first GPU's line, for the results

begin "2. venv with the GPU runtimes"
"${MAKE:-make}" venv
"$BIN/pip" uninstall -y -q onnxruntime
"${PIP[@]}" -r requirements/serve-gpu.txt -c constraints.txt
if [ -z "$("$BIN/python" -c 'import torch; print(torch.version.cuda or "")')" ]; then
    # A local CPU wheel (e.g. 2.13.0+cpu from a find-links folder) won over PyPI's CUDA build.
    torch_pin=$(grep -E '^torch==' requirements/serve-gpu.txt)
    echo "torch is a CPU build; reinstalling $torch_pin from PyPI alone"
    "$BIN/pip" uninstall -y -q torch
    "${PIP[@]}" --isolated --index-url https://pypi.org/simple "$torch_pin" -c constraints.txt
fi
"$BIN/python" - <<'EOF'
import onnxruntime as ort
import torch

print("onnxruntime", ort.__version__, ort.get_available_providers())
print("torch", torch.__version__, "CUDA", torch.version.cuda, "available:", torch.cuda.is_available())
assert "CUDAExecutionProvider" in ort.get_available_providers(), "onnxruntime has no CUDA provider"
assert torch.cuda.is_available(), "torch sees no CUDA device"
EOF

begin "3. model import"
BENTOML_HOME=$(mktemp -d /tmp/textbento-gpu-home.XXXXXX)
export BENTOML_HOME
tag=$("$BIN/python" -m train_import.import_model --name bench-minilm | tail -n 1)
echo "$tag in $BENTOML_HOME"

begin "4. ceilings and served points"
"$BIN/python" -m bench.gpu --tag "$tag" --gpu "$gpu"
echo "== $step: done in $((SECONDS - step_started)) s"
echo "== total: $((SECONDS - started)) s"
