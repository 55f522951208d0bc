#!/usr/bin/env bash
# The OCI image of a model: bentoml build, then bentoml containerize.
#
#   deploy/image/build.sh [cpu|gpu]          # MODEL=<store tag> (default text-model:latest), IMAGE=<name:tag>
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
    *) echo "usage: $0 [cpu|gpu]" >&2; exit 2 ;;
esac
image="${IMAGE:-textbento:$flavour}"
started=$SECONDS

# The CPU image has no PyTorch: its model must carry the ONNX graphs that the onnx backends run.
if [ "$flavour" = cpu ] && ! "$bentoml" models get "$model" -o json | grep -q '"onnx": true'; then
    echo "$model has no ONNX graphs, which the CPU image serves with; add them with:" >&2
    echo "  python -m train_import.export_onnx $model" >&2
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
bento="$("$bentoml" build -f "$bentofile" --arg "model=$model" -o tag | tail -n 1)"
bento="${bento#__tag__:}"
"$bentoml" containerize "$bento" "${backend[@]}" --image-tag "$image"
# The CPU image, flattened: deploy/image/slim.sh deletes what serving never uses (BentoML's build
# tools, uv and its cache, the model's PyTorch and fp16 weights), and only a squashed commit makes
# that smaller. Config (entrypoint, user, env) carries over; the unsquashed image's layers stay
# cached for the next build. Not with a Docker engine, which has no squashing commit.
if [ "$flavour" = cpu ] && [ "${backend[1]}" = buildah ]; then
    full="$(podman image inspect --format '{{.Id}}' "$image")"
    container="$(buildah from --quiet --pull=never "$image")"
    trap 'buildah rm "$container" >/dev/null 2>&1 || true' EXIT
    buildah copy "$container" "$here/slim.sh" /tmp/slim.sh >/dev/null
    buildah run --user root "$container" -- bash /tmp/slim.sh
    buildah commit --quiet --squash --rm "$container" "$image" >/dev/null
    trap - EXIT
    podman rmi --no-prune "$full" >/dev/null
fi
size_mb=$(( $(size) / 1000000 ))
build_s=$(( SECONDS - started ))
echo "image $image from bento $bento: $size_mb MB, built in $build_s s"
# REPORT=<file>: the same as JSON (make image writes bench/results/image-<flavour>.json).
if [ -n "${REPORT:-}" ]; then
    printf '{"image": "%s", "bento": "%s", "model": "%s", "size_mb": %s, "build_s": %s, "date": "%s"}\n' \
        "$image" "$bento" "$model" "$size_mb" "$build_s" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$REPORT"
fi
