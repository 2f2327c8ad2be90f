"""How steadily this machine's CPUs run: the floor under every latency percentile here.

    .venv/bin/python bench/cpu_steadiness_bench.py [--seconds 10] [--runs 3]

Run it with nothing else running. One process per CPU, each pinned to its CPU, repeats a
fixed piece of pure-Python arithmetic (calibrated to ~1 ms) with a 2 ms sleep between
pieces, and records when each piece started, how long it took on the wall clock and how
much CPU time the kernel charged for it. On a steady machine every piece takes about the
median. A piece that takes over 2.5x the median is *slow*; slow pieces less than 300 ms
apart, on any CPU, form one *slow window*.

What it reports (medians over --runs, each run in ``runs``):

- ``piece_ms``: the median piece;
- ``windows_per_s`` and ``period_s``: how often slow windows come, and the median gap
  between their starts;
- ``window_ms``: the median window, from its first slow piece's start to its last's end;
- ``worst_slowdown``: the slowest piece over the median (10 means a piece ran ten times
  slower than usual);
- ``lost_ms_per_window``: per CPU, the wall time slow pieces took beyond the median;
- ``lost_share``: per CPU, the share of the run's wall time lost that way;
- ``on_every_cpu``: the share of windows in which every CPU had a slow piece (1.0: the
  whole machine slows at once, not one CPU);
- ``cpu_charged``: CPU time over wall time of the slow pieces. Near 1.0, the kernel saw
  the thread running all along: nothing in this machine took the CPU from it (that would
  show as waiting), so the CPU itself ran slower, which is the host's doing.

Progress goes to stderr, one JSON summary to stdout.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

SLOW_FACTOR = 2.5  # a piece this many times the median is slow
WINDOW_GAP_S = 0.3  # slow pieces closer than this belong to one window
PAUSE_S = 0.002
PIECE_TARGET_S = 0.001

Sample = tuple[float, float, float]  # start (monotonic), wall seconds, thread CPU seconds


def _piece(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def _calibrate() -> int:
    n = 1000
    while True:
        started = time.perf_counter()
        _piece(n)
        took = time.perf_counter() - started
        if took >= PIECE_TARGET_S / 4:
            return max(1, int(n * PIECE_TARGET_S / took))
        n *= 2


def _probe(cpu: int, n: int, start_at: float, seconds: float, out: mp.Queue) -> None:
    os.sched_setaffinity(0, {cpu})
    samples: list[Sample] = []
    while time.monotonic() < start_at:
        time.sleep(0.001)
    end = start_at + seconds
    while (began := time.monotonic()) < end:
        cpu_began = time.thread_time()
        _piece(n)
        samples.append((began, time.monotonic() - began, time.thread_time() - cpu_began))
        time.sleep(PAUSE_S)
    out.put((cpu, samples))


def _windows(slow: list[tuple[int, Sample]]) -> list[list[tuple[int, Sample]]]:
    windows: list[list[tuple[int, Sample]]] = []
    last_end = float("-inf")
    for cpu, s in sorted(slow, key=lambda item: item[1][0]):
        if s[0] - last_end > WINDOW_GAP_S:
            windows.append([])
        windows[-1].append((cpu, s))
        last_end = max(last_end, s[0] + s[1])
    return windows


def run_once(seconds: float, cpus: list[int], n: int) -> dict[str, object]:
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()
    start_at = time.monotonic() + 0.5
    procs = [ctx.Process(target=_probe, args=(c, n, start_at, seconds, out)) for c in cpus]
    for p in procs:
        p.start()
    per_cpu: dict[int, list[Sample]] = dict(out.get() for _ in procs)
    for p in procs:
        p.join()
    median = statistics.median(s[1] for samples in per_cpu.values() for s in samples)
    slow = [
        (cpu, s) for cpu, samples in per_cpu.items() for s in samples if s[1] > SLOW_FACTOR * median
    ]
    windows = _windows(slow)
    starts = [w[0][1][0] for w in windows]
    lengths = [max(s[0] + s[1] for _, s in w) - w[0][1][0] for w in windows]
    lost = [sum(s[1] - median for _, s in w) / len(cpus) for w in windows]
    slow_wall = sum(s[1] for _, s in slow)
    return {
        "piece_ms": round(median * 1e3, 3),
        "pieces": sum(len(v) for v in per_cpu.values()),
        "slow_pieces": len(slow),
        "windows": len(windows),
        "windows_per_s": round(len(windows) / seconds, 2),
        "period_s": round(statistics.median(b - a for a, b in itertools.pairwise(starts)), 2)
        if len(starts) > 1
        else None,
        "window_ms": round(statistics.median(lengths) * 1e3, 1) if lengths else 0.0,
        "worst_slowdown": round(max((s[1] for _, s in slow), default=median) / median, 1),
        "lost_ms_per_window": round(statistics.median(lost) * 1e3, 1) if lost else 0.0,
        "lost_share": round(sum(lost) / seconds, 4),
        "on_every_cpu": round(
            sum(len({cpu for cpu, _ in w}) == len(cpus) for w in windows) / len(windows), 2
        )
        if windows
        else None,
        "cpu_charged": round(sum(s[2] for _, s in slow) / slow_wall, 2) if slow_wall else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    n = _calibrate()
    runs = []
    for i in range(args.runs):
        r = run_once(args.seconds, cpus, n)
        runs.append(r)
        print(
            f"run {i + 1}/{args.runs}: piece {r['piece_ms']} ms, {r['windows']} slow windows "
            f"(every {r['period_s']} s, {r['window_ms']} ms long, worst {r['worst_slowdown']}x, "
            f"on every CPU {r['on_every_cpu']}, CPU charged {r['cpu_charged']})",
            file=sys.stderr,
        )
    keys = [k for k in runs[0] if all(isinstance(r[k], int | float) for r in runs)]
    summary = {
        "cpus": cpus,
        "seconds": args.seconds,
        "median": {k: statistics.median(r[k] for r in runs) for k in keys},  # type: ignore[misc]
        "runs": runs,
    }
    json.dump(summary, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
