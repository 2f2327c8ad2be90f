#!/usr/bin/env bash
# Install everything the tests need into ./.venv (and kcat from Debian when missing), then run
# the whole suite: unit and integration tests (tests/) and real clients (compat-tests/).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v kcat >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "== installing kcat (Debian) for the kcat compatibility tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null
  else
    echo "kcat is missing and this is not root: install it with 'apt-get install kcat'" >&2
  fi
fi
if ! command -v javac >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "== installing a JDK (Debian) for the Java-client compatibility tests"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
fi
if ! command -v chromedriver >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "== installing chromium (Debian) for the console's browser test"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
# tests/test_image.py builds docker/Dockerfile and runs it: Debian's Docker engine (the test
# starts dockerd when none runs), and mmdebstrap for the base image where no registry is.
if { ! command -v dockerd >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; } \
    && [ "$(id -u)" = 0 ]; then
  echo "== installing docker.io and mmdebstrap (Debian) for the container image test"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io mmdebstrap >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  python3 -m venv .venv
fi
echo "== installing tmsgate and its test dependencies into .venv"
.venv/bin/pip install -q --disable-pip-version-check -e '.[test,spark,hbase]'

echo "== ruff"
.venv/bin/ruff check .
echo "== pytest"
exec .venv/bin/pytest "$@"
