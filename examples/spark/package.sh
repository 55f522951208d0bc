#!/usr/bin/env bash
# What a cluster job takes along (examples/spark/README.md), into build/spark/:
#   textbento.zip  the project's packages, for spark-submit --py-files (the tracked files of this checkout)
#   model.tar      a stored model's directory, for spark-submit --archives build/spark/model.tar#model
#                  (cluster deploy mode; in client mode bulk.spark ships the model itself). Without its
#                  PyTorch weights when it has ONNX graphs: the ONNX backends never read them.
# Usage: examples/spark/package.sh [MODEL_TAG]     (default text-model:latest, from this checkout's store)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=build/spark
mkdir -p "$out"
git archive --format=zip -o "$out/textbento.zip" HEAD bulk models serving api
tag=${1:-text-model:latest}
dir=$(.venv/bin/bentoml models get "$tag" -o path)
if [ -d "$dir/onnx" ]; then skip=(--exclude='./*.safetensors' --exclude='./pytorch_model*'); else skip=(); fi
tar -cf "$out/model.tar" -C "$dir" "${skip[@]}" .
ls -lh "$out/textbento.zip" "$out/model.tar"
