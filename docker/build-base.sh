#!/usr/bin/env bash
# Build a local stand-in for python:3.11-slim-bookworm from Debian's own packages, for
# machines that reach Debian's mirror and PyPI but no image registry (the project's test
# machines). docker/Dockerfile then builds on it unchanged:
#
#   sudo docker/build-base.sh                       # -> tmsgate-local/python:3.11-slim-bookworm
#   DOCKER_BUILDKIT=1 docker build -f docker/Dockerfile --network host \
#       --build-arg BASE_IMAGE=tmsgate-local/python:3.11-slim-bookworm -t tmsgate:latest .
#
# Where a registry is reachable, use the official base instead (the Dockerfile's default).
#
# The stand-in: Debian bookworm (minbase) with Debian's Python 3.11 and a virtual
# environment at /usr/local, so `python` and `pip` are /usr/local/bin's and `pip install`
# lands in /usr/local, as in the official image (Debian's own /usr is PEP 668
# externally managed). It carries this machine's CA bundle, so pip inside a build trusts
# whatever this machine trusts on its way to the package index.
#
# mmdebstrap rather than debootstrap: it resolves and downloads with apt and streams the
# tree as a tarball straight into `docker import`, in about half debootstrap's CPU time.
#
# Needs root, mmdebstrap and a running Docker daemon. Does nothing when an image of that
# name exists (FORCE=1 rebuilds). Environment: DOCKER (the client, default `docker`),
# DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

name=${1:-tmsgate-local/python:3.11-slim-bookworm}
docker=${DOCKER:-docker}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ca_bundle=/etc/ssl/certs/ca-certificates.crt

if [ "${FORCE:-0}" != 1 ] && "$docker" image inspect "$name" >/dev/null 2>&1; then
  echo "$name exists (FORCE=1 rebuilds it)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "build-base.sh: building the base needs root" >&2
  exit 1
fi
if ! command -v mmdebstrap >/dev/null; then
  echo "build-base.sh: mmdebstrap is missing (apt-get install mmdebstrap)" >&2
  exit 1
fi

hooks=(
  # /usr/local/bin/python and /usr/local/bin/pip, as in the official image
  --customize-hook='chroot "$1" python3 -m venv /usr/local'
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*'
)
if [ -f "$ca_bundle" ]; then
  hooks+=(--customize-hook="copy-in $ca_bundle /etc/ssl/certs")
fi

echo "== mmdebstrap bookworm (minbase, python3) | docker import $name"
# pipefail: a failed mmdebstrap fails the script even though import read a short stream
# (and then the import itself fails on the truncated tarball).
mmdebstrap --mode=root --variant=minbase --include=python3,python3-venv,ca-certificates \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  "${hooks[@]}" bookworm - "$mirror" \
  | "$docker" import \
    --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    - "$name" >/dev/null
echo "$name built"
