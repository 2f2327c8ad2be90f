"""Running ``txn_history.py`` from a test: the bounded runs of test_txn_history.py,
test_txn_history_cluster.py and test_txn_history_workers.py differ in the tool's options
and in what each checks of the summary, not in how the tool is run and reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


@dataclass
class HistoryRun:
    summary: dict[str, Any]
    stderr: str
    workdir: Path
    seconds: float

    @property
    def counts(self) -> dict[str, int]:
        return self.summary["counts"]

    @property
    def stats(self) -> dict[str, Any]:
        return self.summary["stats"]

    def where(self, seed: int, files: str) -> str:
        """What a failure message says: where to look, the checker's examples, the tool's
        last words."""
        return (
            f"seed {seed}, work dir {self.workdir} ({files})\n"
            f"examples: {json.dumps(self.summary['examples'], indent=1)[:6000]}\n"
            f"--- stderr tail ---\n{self.stderr[-3000:]}"
        )

    def report(self, label: str, keys: list[str]) -> None:
        """The summary on stdout (``pytest -s`` shows it): the counts, and how much of each
        kind of work and fault the run exercised."""
        print(f"\n{label}: {self.seconds:.1f} s")
        print("counts:", json.dumps(self.counts))
        print("exercised:", json.dumps({k: self.stats.get(k, 0) for k in keys}))
        if "gateway_faults" in self.stats:
            print("gateway faults:", json.dumps(self.stats["gateway_faults"]))


def run_history(tmp_path: Path, options: list[str], timeout_s: float, label: str) -> HistoryRun:
    """``txn_history.py OPTIONS`` with its work dir and summary under ``tmp_path``; fails
    the test if it overruns ``timeout_s`` or leaves no summary."""
    out = tmp_path / "summary.json"
    workdir = tmp_path / "history"
    cmd = [
        sys.executable,
        str(HERE / "txn_history.py"),
        *options,
        "--workdir",
        str(workdir),
        "--json-out",
        str(out),
    ]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: the tool kills its writers and gateways on the way out
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        pytest.fail(
            f"{label} did not finish in {timeout_s} s (work dir {workdir})\n"
            f"--- stderr ---\n{stderr[-4000:]}"
        )
    seconds = time.monotonic() - started
    assert out.exists(), (
        f"no summary (exit {proc.returncode})\n--- stdout ---\n{stdout[-3000:]}\n"
        f"--- stderr ---\n{stderr[-6000:]}"
    )
    return HistoryRun(json.loads(out.read_text()), stderr, workdir, seconds)
