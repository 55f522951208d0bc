#!/usr/bin/env bash
# The OCI image of a model: bentoml build, then bentoml containerize.
#
#   deploy/image/build.sh [cpu|gpu|gpu-torch]    # MODEL=<store tag> (default text-model:latest), IMAGE=<name:tag>
#
# With a Docker engine, `bentoml containerize` uses it (and pulls its base image). Without one it
# uses buildah on a base image made locally from Debian packages (deploy/image/base.sh), so no
# container registry is needed; buildah, podman, runc and debootstrap are installed with apt-get
# when missing (as root). Prints the image name, its size and how long the build took.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
flavour="${1:-cpu}"
model="${MODEL:-text-model:latest}"
bentoml="${BENTOML:-$root/.venv/bin/bentoml}"
case "$flavour" in
    cpu) bentofile="$root/bentofile.yaml" ;;
    gpu) bentofile="$root/deploy/gpu/bentofile.yaml" ;;
    gpu-torch) bentofile="$root/deploy/gpu-torch/bentofile.yaml" ;;
    *) echo "usage: $0 [cpu|gpu|gpu-torch]" >&2; exit 2 ;;
esac
image="${IMAGE:-textbento:$flavour}"
started=$SECONDS

# Only gpu-torch has PyTorch: the others' model must carry the ONNX graphs that the onnx backends run.
if [ "$flavour" != gpu-torch ] && ! "$bentoml" models get "$model" -o json | grep -q '"onnx": true'; then
    echo "$model has no ONNX graphs, which the $flavour image serves with; add them with:" >&2
    echo "  python -m train_import.export_onnx $model    (or build the gpu-torch image)" >&2
    exit 1
fi

if docker info >/dev/null 2>&1; then
    backend=(--backend docker)
    size() { docker image inspect --format '{{.Size}}' "$image"; }
else
    tools=(buildah podman runc debootstrap)
    missing=()
    for tool in "${tools[@]}"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
        else
            echo "no Docker engine, and ${missing[*]} missing: install them (Debian: apt-get install ${tools[*]})" >&2
            exit 1
        fi
    fi
    source "$here/env.sh"
    "$here/base.sh"
    # pull-never: the base is the local one; `--opt pull=never` would be split by bentoml.
    backend=(--backend buildah --opt pull-never)
    size() { podman image inspect --format '{{.Size}}' "$image"; }
fi

cd "$root"
previous="$( [ "${backend[1]}" = buildah ] && podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
bento="$("$bentoml" build -f "$bentofile" --arg "model=$model" -o tag | tail -n 1)"
bento="${bento#__tag__:}"
"$bentoml" containerize "$bento" "${backend[@]}" --image-tag "$image"
# The image, flattened: deploy/image/slim.sh deletes what serving never uses (BentoML's build tools,
# uv and its cache, the model files the flavour never reads), and only a squashed commit makes that
# smaller. Config (entrypoint, user, env) carries over; the unsquashed image's layers stay cached
# for the next build. Not with a Docker engine, which has no squashing commit.
if [ "${backend[1]}" = buildah ]; then
    full="$(podman image inspect --format '{{.Id}}' "$image")"
    container="$(buildah from --quiet --pull=never "$image")"
    trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
    buildah copy "$container" "$here/slim.sh" /tmp/slim.sh >/dev/null
    buildah run --user root "$container" -- bash /tmp/slim.sh "$flavour"
    buildah commit --quiet --squash --rm "$container" "$image" >/dev/null
    trap - EXIT
    podman rmi --no-prune "$full" >/dev/null
    # The image this tag named before, squashed and now nameless: each rebuild would leave one
    # (5.8 GB for gpu-torch; repeated `make image-test` runs filled a disk). Its layers are its own.
    if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
        podman rmi "$previous" >/dev/null 2>&1 || true  # kept where a container or another tag uses it
    fi
fi
size_mb=$(( $(size) / 1000000 ))
build_s=$(( SECONDS - started ))
echo "image $image from bento $bento: $size_mb MB, built in $build_s s"
# REPORT=<file>: the same as JSON (make image writes bench/results/image-<flavour>.json), with what
# the image holds: du -sm (MiB) of its biggest folders and files (buildah only: podman mounts the image).
if [ -n "${REPORT:-}" ]; then
    contents="{}"
    if [ "${backend[1]}" = buildah ]; then
        rootfs="$(podman image mount "$image")"
        # One du per level (a du counts a folder once, under the first argument holding it); du fails
        # on the patterns a flavour has nothing for.
        contents="$(cd "$rootfs" && { du -sm usr app/.venv home/bentoml/bento; du -sm app/.venv/lib/python3*/site-packages/* \
            home/bentoml/bento/models/*/*/onnx/* home/bentoml/bento/models/*/*/*.safetensors 2>/dev/null || true; } |
            sort -rn | head -n 16 | awk '{ printf "%s\"/%s\": %s", (NR > 1 ? ", " : "{"), $2, $1 } END { print "}" }')"
        podman image unmount "$image" >/dev/null
    fi
    # the machine it was built on (build_s is a fact about it), as every result file records it (models/cpu.py)
    built_on="$(cd "$root" && "$(dirname "$bentoml")/python" -c 'import json; from models.cpu import cpu; print(json.dumps(cpu()))')"
    printf '{"image": "%s", "bento": "%s", "model": "%s", "size_mb": %s, "build_s": %s, "contents_mib": %s, "cpu": %s, "date": "%s"}\n' \
        "$image" "$bento" "$model" "$size_mb" "$build_s" "$contents" "$built_on" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$REPORT"
fi
