#!/usr/bin/env bash
# Install everything the tests need into ./.venv (and Debian packages when missing), then run
# the whole suite: unit and integration tests (tests/) and real clients (compat-tests/).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages some tests need, when missing: kcat (kcat compatibility tests), a JDK
# (Java clients), chromium and its driver (the console's browser test), Docker's engine
# and mmdebstrap (tests/test_image.py builds docker/Dockerfile, with a base image of its
# own where no registry is reachable). One apt run, beside the pip install below.
missing=()
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium chromium-driver)
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
apt_pid=""
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "== installing from Debian: ${missing[*]}"
    ( apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ) &
    apt_pid=$!
  else
    echo "not root, so not installed (the tests that need them skip): ${missing[*]}" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi
# quixstreams pins confluent-kafka<2.13, older than the suite's: a venv of its own for its
# app (compat-tests/test_quixstreams.py), made beside the main install.
quix_pid=""
if [ ! -x .venv-quix/bin/python ] || ! .venv-quix/bin/python -c 'import quixstreams' 2>/dev/null; then
  echo "== installing quixstreams into .venv-quix (in the background)"
  ( python3 -m venv .venv-quix \
    && .venv-quix/bin/pip install -q --disable-pip-version-check 'quixstreams>=3.28,<4' ) &
  quix_pid=$!
fi
echo "== installing tmsgate and its test dependencies into .venv"
.venv/bin/pip install -q --disable-pip-version-check -e '.[test,spark,hbase]'
if [ -n "$quix_pid" ]; then
  wait "$quix_pid"
fi
export TMSGATE_COMPAT_QUIXSTREAMS_PYTHON="${TMSGATE_COMPAT_QUIXSTREAMS_PYTHON:-$PWD/.venv-quix/bin/python}"
if [ -n "$apt_pid" ]; then
  wait "$apt_pid"
fi

echo "== ruff"
.venv/bin/ruff check .
echo "== pytest"
exec .venv/bin/pytest "$@"
