#!/usr/bin/env bash
# Run as root inside the image that `bentoml containerize` built (deploy/image/build.sh), before
# build.sh commits it as one squashed layer: deleting here only shrinks the image because of that.
#
#   slim.sh cpu|gpu|gpu-torch     (the flavour decides which of the model's files stay)
#
# BentoML 1.4's Dockerfile (bento v2) cannot be changed from a bentofile: a dockerfile_template
# turns the bento into a v1 one, and its fixed apt line installs build tools our wheels never use.
set -euo pipefail
flavour="${1:-}"
bento="${BENTO_PATH:-/home/bentoml/bento}"

# The model files the image never reads. Backend auto on CPU loads onnx/model-int8.onnx and checks
# it against onnx/model.onnx (its fallback too); on CUDA it loads onnx/model-fp16.onnx. The PyTorch
# weights need torch, which only the gpu-torch flavour has, and the fp16 graph needs CUDA.
# Tokenizer, config and dense.npz stay in every flavour.
case "$flavour" in
    cpu) unread=(-name '*.safetensors' -o -name 'pytorch_model.bin' -o -name 'model-fp16.onnx' -o -name 'model-fp16.onnx.data') ;;
    gpu) unread=(-name '*.safetensors' -o -name 'pytorch_model.bin') ;;
    gpu-torch) unread=() ;;
    *) echo "usage: $0 cpu|gpu|gpu-torch" >&2; exit 2 ;;
esac

# What BentoML's Dockerfile installs for building sdists (all our pins are wheels) and for adding
# apt keys, with the dependencies apt marked automatic (the base's packages are all manual). Not
# keeping what installed packages merely recommend: python3-pip recommends build-essential, which
# alone kept gcc, binutils and perl (275 MB) in.
export DEBIAN_FRONTEND=noninteractive
apt-get purge -y -q --auto-remove -o APT::AutoRemove::RecommendsImportant=false \
    -o APT::AutoRemove::SuggestsImportant=false build-essential git gnupg2 >/dev/null
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/apt /var/log/dpkg.log
# uv installed the venv and is not run again; its download cache has no mount to go to under buildah.
python -m pip uninstall -y -q uv 2>/dev/null || rm -f /usr/local/bin/uv /usr/local/bin/uvx
rm -rf /root/.cache /tmp/*
# The base's own pip (Debian's python3-pip with setuptools and wheel, where base.sh made the base):
# the venv was made by uv and has no pip in it either; nothing installs at run time.
if dpkg -s python3-pip >/dev/null 2>&1; then
    apt-get purge -y -q --auto-remove python3-pip python3-setuptools python3-wheel >/dev/null
fi
# Translations, manuals and docs, as Debian's slim images drop them: serving runs in C.UTF-8.
rm -rf /usr/share/locale/* /usr/share/man/* /usr/share/doc/* /usr/share/info/*
# Packages' own test suites (onnx's backend test data alone is 17 MB); nothing imports them to serve.
find /app/.venv/lib/python3*/site-packages -mindepth 2 -type d \( -name tests -o -name test \) -prune -exec rm -rf {} +

# NVRTC's second build (libnvrtc.alt.so.13 and its builtins, 114 MB), which nothing here loads:
# ONNX Runtime and PyTorch dlopen libnvrtc.so.13.
rm -f /app/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libnvrtc*.alt.so*

if [ ${#unread[@]} -gt 0 ]; then
    find "$bento/models" -type f \( "${unread[@]}" \) -print -delete
fi
