# Sourced by the image scripts: container storage and isolation that work without a Docker engine
# (rootful buildah/podman in a VM or CI runner without nested namespaces or a systemd cgroup).
export CONTAINERS_STORAGE_CONF="${CONTAINERS_STORAGE_CONF:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/storage.conf}"
export BUILDAH_ISOLATION="${BUILDAH_ISOLATION:-chroot}"
# Cache each Dockerfile step: a second model's image reuses the base, apt and pip layers.
export BUILDAH_LAYERS="${BUILDAH_LAYERS:-true}"
