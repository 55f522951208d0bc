#!/usr/bin/env bash
# The GPU figures in one call, on the lent GPU machine (one H200; no network; its image's python3 is
# Python 3.12 with torch 2.11 on CUDA and transformers 5.17; no bentoml). Here, first:
#     make gpu-wheels        # build/gpu-wheels/: the cp312 wheels it lacks + all-MiniLM-L6-v2's vocab
# then, through the device tool (timeout_s 600, carry ["build/gpu-wheels"]):
#     bash bench/gpu.sh --out $OUT --wheels build/gpu-wheels
# `make bench-gpu-rehearsal` runs the same on this CPU machine (--rehearsal: no CUDA asserts, tiny loads).
#
#   1. the GPU (nvidia-smi)
#   2. the carried wheels installed with pip --target into a scratch folder, put on PYTHONPATH;
#      the versions, and CUDA asserted
#   3. three random-weight models built from configs (python -m bench.gpu build), imported without
#      ONNX into a fresh BENTOML_HOME
#   4. in-process ceilings of the torch backend, fp16 on CUDA, batch 1-256, sorted batches
#   5. the served points through the real `bentoml serve` (torch on CUDA), GPU utilisation sampled
#   6. the short table
# Into --out: gpu-<GPU name>.json (each step adds its part), gpu.log (this output), serve.log.
# Each step runs under a hard time limit, and all of them within --budget seconds (default 540, under
# the device tool's 10 minutes a command): a slow step fails alone and the JSON keeps what was done.
# By estimate on the H200: 2 s, 15 s, 40 s, 90 s, 150 s: about 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

out="" wheels="" python=python3 budget=540 rehearsal=()
while [ $# -gt 0 ]; do
    case $1 in
        --out) out=$2; shift 2 ;;
        --wheels) wheels=$2; shift 2 ;;
        --python) python=$2; shift 2 ;;  # the interpreter holding torch (default: the image's python3)
        --budget) budget=$2; shift 2 ;;
        --rehearsal) rehearsal=(--rehearsal); shift ;;
        *) echo "usage: bench/gpu.sh --out DIR --wheels DIR [--python PY] [--budget S] [--rehearsal]" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] && [ -d "$wheels" ] || { echo "bench/gpu.sh: --out and an existing --wheels folder are required" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
exec > >(tee "$out/gpu.log") 2>&1

# No network there: nothing may try the Hub or an index (here neither, so that the rehearsal proves it).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_NO_INDEX=1 BENTOML_DO_NOT_TRACK=true
export PYTHONUNBUFFERED=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TOKENIZERS_PARALLELISM=false
scratch=$(mktemp -d /tmp/textbento-gpu.XXXXXX)  # the --target install and the model store
trap 'rm -rf "$scratch"' EXIT
export BENTOML_HOME=$scratch/bentoml PYTHONPATH=$scratch/site:$PWD
deadline=$((SECONDS + budget))
started=$SECONDS

# step NAME LIMIT COMMAND...: COMMAND under `timeout`, LIMIT seconds or what is left of the budget.
step() {
    local name=$1 limit=$2 rc=0 at=$SECONDS
    shift 2
    [ $((deadline - SECONDS)) -lt "$limit" ] && limit=$((deadline - SECONDS))
    [ "$limit" -gt 0 ] || { echo "== $name: no time left in the ${budget} s budget" >&2; exit 124; }
    echo "== $name (limit $limit s)"
    # SIGTERM first: bench.gpu then stops the server it started (its own process group) within 30 s.
    timeout --kill-after=40 "$limit" "$@" || rc=$?
    [ "$rc" -eq 0 ] || { echo "== $name FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ', timed out')) after $((SECONDS - at)) s" >&2; exit "$rc"; }
    echo "== $name: done in $((SECONDS - at)) s"
}

if command -v nvidia-smi >/dev/null; then
    step "1. GPU" 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
else
    [ ${#rehearsal[@]} -gt 0 ] || { echo "no nvidia-smi: not a GPU machine (--rehearsal to run anyway)" >&2; exit 1; }
    echo "== 1. GPU: none (rehearsal)"
fi
step "2. wheels" 120 "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$scratch/site" "$wheels"/*.whl
step "2b. versions, CUDA" 60 "$python" -m bench.gpu check "${rehearsal[@]}"
step "3. models" 180 "$python" -m bench.gpu build --vocab "$wheels/minilm" "${rehearsal[@]}"
step "4. ceilings" 180 "$python" -m bench.gpu ceiling --out "$out" "${rehearsal[@]}"
step "5. served" 300 "$python" -m bench.gpu served --out "$out" "${rehearsal[@]}"
step "6. table" 30 "$python" -m bench.gpu table --out "$out" "${rehearsal[@]}"
echo "== total: $((SECONDS - started)) s"
