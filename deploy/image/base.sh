#!/usr/bin/env bash
# A local stand-in for the base image BentoML's Dockerfile starts FROM, for builds where no
# container registry is reachable (air-gapped, or behind a proxy that only passes package mirrors).
#
#   deploy/image/base.sh [IMAGE]        # default docker.io/library/python:3.11-slim
#
# Debian bookworm from its package mirror (debootstrap), with python3.11, venv, pip and
# ca-certificates, imported under the name the Dockerfile expects. Extra CA certificates (a
# TLS-intercepting proxy's) from $EXTRA_CA_DIR (default /usr/local/share/ca-certificates) are
# trusted inside, so pip works during the build. Needs root, debootstrap and podman.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"

image="${1:-docker.io/library/python:3.11-slim}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
extra_ca_dir="${EXTRA_CA_DIR:-/usr/local/share/ca-certificates}"

if podman image exists "$image"; then
    echo "base image $image already present"
    exit 0
fi
rootfs="$(mktemp -d /var/tmp/textbento-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase --include=python3.11,python3-venv,python3-pip,ca-certificates bookworm "$rootfs" "$mirror"
if compgen -G "$extra_ca_dir/*.crt" >/dev/null; then
    cp "$extra_ca_dir"/*.crt "$rootfs/usr/local/share/ca-certificates/"
    chroot "$rootfs" update-ca-certificates
fi
# BentoML's Dockerfile calls `python` and installs uv system-wide with pip (PEP 668 would refuse).
ln -sf python3.11 "$rootfs/usr/bin/python"
ln -sf python3.11 "$rootfs/usr/bin/python3"
rm -f "$rootfs"/usr/lib/python3.11/EXTERNALLY-MANAGED
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*
tar -C "$rootfs" -c . | podman import \
    --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    - "$image"
echo "base image $image imported"
