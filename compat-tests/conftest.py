"""Fixtures for the compat suite: a real tmsgate gateway subprocess and real Kafka clients.

Nothing here imports gateway internals; the gateway is a black box on a TCP port.

    .venv/bin/pytest compat-tests            # starts `tmsgate serve` on a free port
    .venv/bin/pytest compat-tests/test_kcat.py -k codec

Environment:
  TMSGATE_COMPAT_BOOTSTRAP=host:port  run against an already running broker instead of starting
                                      a gateway (e.g. a real Kafka as an oracle); restart tests
                                      and tmsgate-only specs are skipped then.
  TMSGATE_COMPAT_GATEWAY_ARGS="..."   extra arguments appended to `tmsgate serve`.
  TMSGATE_COMPAT_KEEP_LOG=1           keep the gateway's temp dir (store + gateway.log) and print
                                      the log path at the end of the session.
  CI=1                                a missing java/javac/kcat or jar download FAILS instead of
                                      skipping.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compat_helpers import ADMIN_TIMEOUT_S, IN_CI, free_port, port_open, unavailable

HERE = Path(__file__).resolve().parent
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def _tmsgate_script() -> Path:
    # The console script sits next to the interpreter running pytest (the venv's bin/).
    return Path(sys.executable).parent / "tmsgate"


_LIVE: set[subprocess.Popen] = set()


@atexit.register
def _kill_leftovers() -> None:
    """If pytest dies without running finalizers, do not leave gateways running."""
    for proc in list(_LIVE):
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()


class Gateway:
    """A `tmsgate serve` subprocess on 127.0.0.1:<port> over a LevelDB store in a temp dir."""

    external = False

    def __init__(self, workdir: Path, port: int | None = None, extra_args: list[str] | None = None):
        self.workdir = workdir
        self.store_dir = workdir / "store"
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "gateway.log"
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.exit_codes: list[int | None] = []

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def store_url(self) -> str:
        # "leveldb://" + "/abs/path"
        return f"leveldb://{self.store_dir}"

    def command(self) -> list[str]:
        cmd = [
            str(_tmsgate_script()),
            "serve",
            "--store",
            self.store_url,
            "--kafka-listen",
            self.bootstrap,
            "--no-http",  # the compat suite speaks Kafka only (HTTP binds a fixed port)
        ]
        cmd += shlex.split(os.environ.get("TMSGATE_COMPAT_GATEWAY_ARGS", ""))
        return cmd + self.extra_args

    def log_tail(self, max_lines: int = 60, start: int = 0) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(start)
                data = f.read()
        except OSError:
            return "<no gateway log>"
        lines = data.decode("utf-8", "replace").splitlines()
        if len(lines) > max_lines:
            lines = [f"... ({len(lines) - max_lines} earlier lines)", *lines[-max_lines:]]
        return "\n".join(lines)

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def start(self) -> None:
        script = _tmsgate_script()
        if not script.exists():
            raise RuntimeError(
                f"tmsgate console script not found at {script} (is the package installed?)"
            )
        self.starts += 1
        # The gateway reads TMSGATE_* settings from the environment; keep the caller's out so
        # the command line above is the whole configuration.
        env = {k: v for k, v in os.environ.items() if not k.startswith("TMSGATE_")}
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:
            banner = f"\n===== compat-tests: start #{self.starts}: {shlex.join(self.command())}\n"
            log.write(banner.encode())
            log.flush()
            self.proc = proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(self.workdir),
                start_new_session=True,
            )
        _LIVE.add(proc)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                raise RuntimeError(
                    f"tmsgate exited with code {rc} before listening on {self.bootstrap}.\n"
                    f"command: {shlex.join(self.command())}\n"
                    f"--- gateway output ---\n{self.log_tail(80)}"
                )
            if port_open(self.host, self.port):
                return
            time.sleep(0.05)
        self._kill()
        raise RuntimeError(
            f"tmsgate did not accept connections on {self.bootstrap} "
            f"within {START_TIMEOUT_S:.0f}s.\n"
            f"command: {shlex.join(self.command())}\n"
            f"--- gateway output ---\n{self.log_tail(80)}"
        )

    def _kill(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.exit_codes.append(self.proc.wait(timeout=STOP_TIMEOUT_S))
        self.proc = None

    def stop(self) -> None:
        """SIGTERM, wait up to 10 s, then SIGKILL."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with open(self.log_path, "ab") as log:
                    log.write(b"\n===== compat-tests: no exit 10 s after SIGTERM, killing\n")
                self._kill()
                return
        self.exit_codes.append(self.proc.returncode)
        with open(self.log_path, "ab") as log:
            log.write(
                f"\n===== compat-tests: exit code {self.proc.returncode} after SIGTERM\n".encode()
            )
        self.proc = None

    def restart(self) -> None:
        """Stop (SIGTERM) and start again on the same store directory and port."""
        self.stop()
        self.start()

    def crash_restart(self) -> None:
        """SIGKILL (no clean shutdown) and start again on the same store directory and port."""
        if self.proc is not None:
            with open(self.log_path, "ab") as log:
                log.write(b"\n===== compat-tests: SIGKILL\n")
            self._kill()
        self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ExternalBroker:
    """A broker that is already running (TMSGATE_COMPAT_BOOTSTRAP): no restart, no log."""

    external = True

    def __init__(self, bootstrap: str):
        self._bootstrap = bootstrap
        self.host, port = bootstrap.rsplit(":", 1)
        self.port = int(port)
        self.log_path = None

    @property
    def bootstrap(self) -> str:
        return self._bootstrap

    def restart(self) -> None:
        pytest.skip(
            "restart needs a gateway started by the suite (TMSGATE_COMPAT_BOOTSTRAP is set)"
        )

    crash_restart = restart

    def log_tail(self, *a, **k) -> str:
        return "<external broker: no log>"

    def log_size(self) -> int:
        return 0

    def alive(self) -> bool:
        return port_open(self.host, self.port)


_GATEWAY: Gateway | ExternalBroker | None = None


@pytest.fixture(scope="session")
def gateway():
    """The gateway under test: `.bootstrap`, `.restart()`, `.crash_restart()`.

    Stopped (SIGTERM, then SIGKILL) at the end of the session.
    """
    global _GATEWAY
    ext = os.environ.get("TMSGATE_COMPAT_BOOTSTRAP")
    if ext:
        broker = ExternalBroker(ext)
        if not broker.alive():
            pytest.fail(
                f"TMSGATE_COMPAT_BOOTSTRAP={ext} does not accept connections", pytrace=False
            )
        _GATEWAY = broker
        yield broker
        _GATEWAY = None
        return
    workdir = Path(tempfile.mkdtemp(prefix="tmsgate-compat-"))
    gw = Gateway(workdir)
    error = None
    try:
        gw.start()
    except RuntimeError as exc:
        error = str(exc)
    if error is not None:
        pytest.fail(error, pytrace=False)
    _GATEWAY = gw
    try:
        yield gw
    finally:
        _GATEWAY = None
        gw.stop()
        if os.environ.get("TMSGATE_COMPAT_KEEP_LOG"):
            print(f"\ntmsgate compat gateway log: {gw.log_path}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def private_gateway(tmp_path, request):
    """Factory for a second gateway owned by one test: private_gateway(port=..., extra_args=[..]).

    For fault-injection tests that need their own listener/advertised address. Stopped at the
    end of the test. Skipped when the suite runs against an external broker.
    """
    if os.environ.get("TMSGATE_COMPAT_BOOTSTRAP"):
        pytest.skip("needs a gateway started by the suite (TMSGATE_COMPAT_BOOTSTRAP is set)")
    started: list[Gateway] = []
    request.node._tmsgate_private = started

    def make(port: int | None = None, extra_args: list[str] | None = None) -> Gateway:
        gw = Gateway(tmp_path / f"gw{len(started)}", port=port, extra_args=extra_args)
        started.append(gw)
        gw.start()
        return gw

    yield make
    for gw in started:
        gw.stop()


@pytest.fixture
def tmsgate_only(gateway):
    """Skip specs that only hold for tmsgate when running against an external broker."""
    if gateway.external:
        pytest.skip("tmsgate-specific behaviour; not expected from an external broker")
    return gateway


@pytest.fixture
def topic_name(request) -> str:
    """A fresh, unique topic name (not created)."""
    mod = Path(str(request.node.fspath)).stem.removeprefix("test_").replace("_", "-")
    test = request.node.name.removeprefix("test_")
    slug = "".join(c if c.isalnum() else "-" for c in test.lower()).strip("-")[:40]
    return f"compat-{mod}-{slug}-{uuid.uuid4().hex[:8]}"


def _create_topics(gateway, names: list[str]) -> None:
    """CreateTopics with one partition each (kafka-python KafkaAdminClient)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(
        bootstrap_servers=gateway.bootstrap,
        request_timeout_ms=int(ADMIN_TIMEOUT_S * 1000),
        client_id="compat-topic-fixture",
    )
    try:
        admin.create_topics({n: {"num_partitions": 1, "replication_factor": 1} for n in names})
    finally:
        admin.close()


@pytest.fixture
def topic(gateway, topic_name) -> str:
    """A fresh topic created with one partition (kafka-python KafkaAdminClient, CreateTopics)."""
    _create_topics(gateway, [topic_name])
    return topic_name


@pytest.fixture
def make_topics(gateway, topic_name):
    """Factory: make_topics("in", "out") creates fresh 1-partition topics named
    <topic_name>-in, <topic_name>-out (one CreateTopics) and returns their names."""

    def make(*suffixes: str) -> list[str]:
        names = [f"{topic_name}-{s}" for s in suffixes]
        _create_topics(gateway, names)
        return names

    return make


# --------------------------------------------------------------------------- java


class JavaResult:
    def __init__(self, rc: int, lines: list[dict], stderr: str):
        self.rc = rc
        self.lines = lines
        self.stderr = stderr

    @property
    def one(self) -> dict:
        assert len(self.lines) == 1, (
            f"expected one JSON object, got {self.lines}\nstderr:\n{self.stderr}"
        )
        return self.lines[0]


class JavaClient:
    """Runs compat-tests/java/KafkaCompat (kafka-clients 3.9.0) and parses its JSON lines."""

    def __init__(self, classpath: str):
        self.classpath = classpath

    def command(self, *args) -> list[str]:
        return [
            "java",
            "-Xss1m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            self.classpath,
            "KafkaCompat",
            *map(str, args),
        ]

    def run(self, *args, timeout: float = 60.0, check: bool = True) -> JavaResult:
        """Run one KafkaCompat command to completion (bounded by timeout)."""
        try:
            p = subprocess.run(self.command(*args), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(
                f"java {shlex.join(map(str, args))} did not finish within {timeout}s\n"
                f"--- stdout ---\n{exc.stdout}\n--- stderr ---\n{exc.stderr}"
            ) from None
        return self.result(args, p.returncode, p.stdout, p.stderr, check)

    def start(self, *args) -> subprocess.Popen:
        """Start a KafkaCompat command in the background; finish it with .finish()."""
        return subprocess.Popen(
            self.command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def finish(
        self, proc: subprocess.Popen, args, timeout: float = 60.0, check: bool = True
    ) -> JavaResult:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(
                f"java {shlex.join(map(str, args))} did not finish within {timeout}s\n"
                f"--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-6000:]}"
            ) from None
        return self.result(args, proc.returncode, out, err, check)

    @staticmethod
    def result(args, rc: int, stdout: str, stderr: str, check: bool) -> JavaResult:
        import json

        lines = [
            json.loads(ln) for ln in (x.strip() for x in stdout.splitlines()) if ln.startswith("{")
        ]
        if check and rc != 0:
            raise AssertionError(
                f"java KafkaCompat {shlex.join(map(str, args))} exited {rc}\n"
                f"--- stdout ---\n{stdout[-4000:]}\n--- stderr ---\n{stderr[-6000:]}"
            )
        return JavaResult(rc, lines, stderr)


@pytest.fixture(scope="session")
def java_client() -> JavaClient:
    """Builds the Java driver once per session (compat-tests/java/build.sh)."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} not found on PATH: the Java compat tests need a JDK 17")
    try:
        p = subprocess.run(
            ["bash", str(HERE / "java" / "build.sh")],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, PYTHON=sys.executable),
        )
    except subprocess.TimeoutExpired:
        unavailable("compat-tests/java/build.sh did not finish within 300s")
    if p.returncode != 0:
        unavailable(f"compat-tests/java/build.sh failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    classpath = p.stdout.strip().splitlines()[-1]
    return JavaClient(classpath)


# --------------------------------------------------------------------------- reporting


@pytest.fixture(autouse=True)
def _gateway_log_marker(request):
    """Remember where the gateway log stood when the test started (for failure reports)."""
    gw = _GATEWAY
    request.node._tmsgate_log_start = gw.log_size() if gw is not None else 0
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    if _GATEWAY is not None and not _GATEWAY.external:
        start = getattr(item, "_tmsgate_log_start", 0)
        alive = "running" if _GATEWAY.alive() else f"NOT RUNNING (exit codes {_GATEWAY.exit_codes})"
        rep.sections.append(
            (
                f"tmsgate gateway log during this test [gateway {alive}]",
                _GATEWAY.log_tail(120, start),
            )
        )
    for i, gw in enumerate(getattr(item, "_tmsgate_private", [])):
        rep.sections.append((f"private tmsgate gateway #{i} log", gw.log_tail(120)))


def pytest_report_header(config):
    ext = os.environ.get("TMSGATE_COMPAT_BOOTSTRAP")
    target = f"external broker {ext}" if ext else f"gateway {_tmsgate_script()} serve"
    return [f"compat-tests: {target}; CI={'yes' if IN_CI else 'no'}"]
