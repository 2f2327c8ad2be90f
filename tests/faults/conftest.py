"""Fixtures for the fault suite (tests/faults/): real clients, real sockets, a real
``tmsgate serve`` process on a LevelDB store on disk, killed and restarted on purpose.

Nothing here imports gateway code: the gateway is a black box on a TCP port, as in
compat-tests/. See docs/fault-suite.md for what each test does.

Modes
-----
Bounded (the default, what CI runs): every test is sized to finish in well under a minute.

Long (``TMSGATE_FAULTS_LONG=1``): the same tests with more cycles, records and trials, for a
soak before a release; pytest-timeout is raised to ``TMSGATE_FAULTS_LONG_TIMEOUT_S`` (default
7200 s) for the tests in this folder. A test picks its size with ``scale(bounded, long)``::

    cycles = scale(4, 60)

Figures
-------
Every test can record figures (counts, rates, durations); they are printed by a
``pytest_terminal_summary`` hook at the end of the run, in a section "tmsgate fault-suite
figures", so they show in CI output without ``-s``. Two ways to record them:

* the ``faults_report`` fixture, bound to the test's id::

      def test_x(faults_report):
          faults_report(acked=1000, lost=0)                 # row named after the test
          faults_report("confluent", received=10, dups=0)   # row "<test id> confluent"

* the module function, from anywhere (a helper, a thread)::

      from faults.conftest import report
      report("loop stall", max_gap_ms=12)

Figures are recorded whether the test then passes or fails (record them before asserting),
and a failed test's report also carries them. ``TMSGATE_FAULTS_FIGURES=path.jsonl`` also
appends them as JSON lines to that file.

Gateways
--------
``fault_gateway(*extra_args, env=None, port=None, name=None)`` starts ``tmsgate serve`` on a
fixed store directory (under the test's tmp_path) and a fixed free port, and returns a
:class:`FaultGateway`: ``.bootstrap``, ``.kill9()`` (SIGKILL, no clean shutdown),
``.start()``, ``.crash_restart()`` (kill9 + start on the same store and port),
``.restart()`` (SIGTERM + start), ``.stop()``, ``.alive()``, ``.log_tail()``, ``.kills``.
Every gateway started is stopped at the end of the test and a failed test gets the tail of
its log. ``fault_gateway_module`` is the same factory for gateways shared by the tests of one
module (a module-scoped fixture may use it). ``TMSGATE_FAULTS_KEEP=1`` keeps the store and
gateway.log (the path is printed). ``fault_topic_name`` is a fresh topic name.

Other environment
-----------------
``TMSGATE_FAULTS_GATEWAY_ARGS="--log-level DEBUG"``: extra ``tmsgate serve`` arguments.
``PYTHONPATH`` reaches the gateway process, so a gateway built from another tree (say the
last release, unpacked with ``git archive``) can be run against these tests.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

LONG = os.environ.get("TMSGATE_FAULTS_LONG", "") not in ("", "0")
LONG_TIMEOUT_S = float(os.environ.get("TMSGATE_FAULTS_LONG_TIMEOUT_S", "7200"))
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
HERE = Path(__file__).resolve().parent


def scale(bounded: Any, long: Any) -> Any:
    """The bounded (CI) value, or the long-mode one under TMSGATE_FAULTS_LONG=1."""
    return long if LONG else bounded


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


# --------------------------------------------------------------------------- figures

_FIGURES: list[tuple[str, dict[str, Any]]] = []
_FIGURES_LOCK = threading.Lock()


def report(name: str, **figures: Any) -> None:
    """Record figures under ``name``; printed at the end of the run (see module doc)."""
    with _FIGURES_LOCK:
        _FIGURES.append((name, dict(figures)))
    path = os.environ.get("TMSGATE_FAULTS_FIGURES")
    if path:
        line = json.dumps({"name": name, "long": LONG, **figures}, default=str)
        with _FIGURES_LOCK, open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def format_figures(figures: dict[str, Any]) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in figures.items())


@pytest.fixture
def faults_report(request) -> Callable[..., None]:
    """``faults_report(**figures)`` or ``faults_report(label, **figures)`` for this test."""
    test_id = request.node.nodeid.split("::", 1)[-1]
    mine: list[tuple[str, dict[str, Any]]] = []
    request.node._faults_figures = mine

    def record(label: str | None = None, /, **figures: Any) -> None:
        name = f"{test_id} {label}" if label else test_id
        mine.append((name, figures))
        report(name, **figures)

    return record


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _FIGURES:
        return
    mode = "long (TMSGATE_FAULTS_LONG=1)" if LONG else "bounded"
    terminalreporter.write_sep("=", f"tmsgate fault-suite figures, {mode} mode")
    for name, figures in _FIGURES:
        terminalreporter.write_line(f"{name}: {format_figures(figures)}")


def pytest_collection_modifyitems(config, items) -> None:
    if not LONG:
        return
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))


def pytest_report_header(config) -> list[str]:
    return [f"tmsgate fault suite: {'LONG' if LONG else 'bounded'} mode"]


# --------------------------------------------------------------------------- gateways

_LIVE: set[subprocess.Popen] = set()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()


class FaultGateway:
    """``tmsgate serve`` on 127.0.0.1:<port> over ``<workdir>/store``: killable, restartable
    on the same store and port."""

    def __init__(
        self,
        workdir: Path,
        *extra_args: str,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.store_dir = workdir / "store"
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "gateway.log"
        self.port = port or free_port()
        self.http_port = free_port()  # fixed too: a restart serves HTTP where it did
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.kills = 0
        self.exit_codes: list[int | None] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        return [
            str(Path(sys.executable).parent / "tmsgate"),
            "serve",
            "--store",
            f"leveldb://{self.store_dir}",
            "--kafka-listen",
            self.bootstrap,
            "--http-listen",
            f"127.0.0.1:{self.http_port}",
            *shlex.split(os.environ.get("TMSGATE_FAULTS_GATEWAY_ARGS", "")),
            *self.extra_args,
        ]

    def _note(self, text: str) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== faults: {text}\n".encode())

    def start(self) -> FaultGateway:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.starts += 1
        # The command line is the whole configuration: no TMSGATE_* from the caller.
        env = {k: v for k, v in os.environ.items() if not k.startswith("TMSGATE_")}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        self._note(f"start #{self.starts}: {shlex.join(self.command())}")
        with open(self.log_path, "ab") as log:
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
            rc = proc.poll()
            if rc is not None:
                raise RuntimeError(
                    f"tmsgate exited with {rc} before listening on {self.bootstrap}\n"
                    f"{self.log_tail(60)}"
                )
            if port_open(self.port) and port_open(self.http_port):  # HTTP starts last
                return self
            time.sleep(0.05)
        self.kill9()
        raise RuntimeError(f"tmsgate did not listen on {self.bootstrap} within {START_TIMEOUT_S}s")

    def kill9(self) -> None:
        """SIGKILL: no clean shutdown, no flush beyond what was already fsync'd."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self._note("SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            self.kills += 1
        self.exit_codes.append(self.proc.wait(timeout=STOP_TIMEOUT_S))
        _LIVE.discard(self.proc)
        self.proc = None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._note("no exit after SIGTERM")
                self.kill9()
                return
        self.exit_codes.append(self.proc.returncode)
        _LIVE.discard(self.proc)
        self.proc = None

    def crash_restart(self) -> None:
        self.kill9()
        self.start()

    def restart(self) -> None:
        self.stop()
        self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, max_lines: int = 80) -> str:
        try:
            lines = self.log_path.read_bytes().decode("utf-8", "replace").splitlines()
        except OSError:
            return "<no gateway log>"
        if len(lines) > max_lines:
            lines = [f"... ({len(lines) - max_lines} earlier lines)", *lines[-max_lines:]]
        return "\n".join(lines)


class _Gateways:
    """The gateways one test (or one module) started, under one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[FaultGateway] = []

    def make(
        self,
        *extra_args: str,
        env: dict[str, str] | None = None,
        port: int | None = None,
        name: str | None = None,
    ) -> FaultGateway:
        workdir = self.root / (name or f"gw{len(self.started)}")
        gw = FaultGateway(workdir, *extra_args, port=port, env=env)
        self.started.append(gw)
        return gw.start()

    def close(self) -> None:
        for gw in self.started:
            gw.stop()
        keep = os.environ.get("TMSGATE_FAULTS_KEEP")
        for gw in self.started:
            if keep:
                print(f"\nfault-suite gateway kept: {gw.workdir}", file=sys.stderr)
            else:
                shutil.rmtree(gw.workdir, ignore_errors=True)


@pytest.fixture
def fault_gateway(tmp_path, request) -> Iterator[Callable[..., FaultGateway]]:
    """Factory: ``fault_gateway(*extra_args, env=None, port=None, name=None)`` -> a started
    FaultGateway with its own store under tmp_path. All are stopped at the end of the test."""
    pool = _Gateways(tmp_path)
    request.node._faults_gateways = pool.started
    yield pool.make
    pool.close()


@pytest.fixture(scope="module")
def fault_gateway_module(tmp_path_factory, request) -> Iterator[Callable[..., FaultGateway]]:
    """Like fault_gateway, for gateways shared by the tests of one module."""
    pool = _Gateways(tmp_path_factory.mktemp("faults"))
    request.node._faults_gateways = pool.started
    yield pool.make
    pool.close()


@pytest.fixture(params=["leveldb", "hbase"])
def store_args(request, tmp_path) -> Iterator[tuple[str, ...]]:
    """Extra ``serve`` arguments naming the store: the gateway's own LevelDB, or hbase://
    on the Thrift 1 stand-in (tests/hbase_standin.py; not HBase) in a process of its own,
    so that killing the gateway leaves whatever part of a write reached the store."""
    if request.param == "leveldb":
        yield ()
        return
    pytest.importorskip("happybase", reason="the hbase engine needs tmsgate[hbase]")
    standin = Path(__file__).resolve().parent.parent / "hbase_standin.py"
    with open(tmp_path / "hbase-standin.log", "wb") as log:
        # Up to 3 gateways of pool_size 8 on it: the worker threads an operator gives
        # HBase's Thrift server for them (docs/hbase.md); with its default 16, as HBase,
        # the third gateway's new connections go unanswered.
        proc = subprocess.Popen(
            [sys.executable, str(standin), "--port", "0", "--min-worker-threads", "64"],
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    try:
        # It prints its address once it listens (the port the OS chose).
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=START_TIMEOUT_S):
                raise RuntimeError("the HBase stand-in did not start listening")
        address = proc.stdout.readline().decode().split(" on ", 1)[1].split(";")[0]
        yield ("--store", f"hbase://{address}/faults")
    finally:
        proc.terminate()
        proc.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture
def fault_topic_name(request) -> str:
    """A fresh, unique topic name (not created)."""
    test = request.node.name.removeprefix("test_")
    slug = "".join(c if c.isalnum() else "-" for c in test.lower()).strip("-")[:40]
    return f"faults-{slug}-{uuid.uuid4().hex[:8]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call":
        return
    figures = getattr(item, "_faults_figures", None)
    if figures:
        text = "\n".join(f"{name}: {format_figures(f)}" for name, f in figures)
        rep.sections.append(("fault-suite figures", text))
    if rep.failed:
        module = item.getparent(pytest.Module)
        gateways = [
            *getattr(item, "_faults_gateways", []),
            *getattr(module, "_faults_gateways", []),
        ]
        for i, gw in enumerate(gateways):
            state = "running" if gw.alive() else "stopped"
            rep.sections.append(
                (f"tmsgate gateway #{i} log ({state}, kills={gw.kills})", gw.log_tail(150))
            )
