"""History checker, bounded: random concurrent transactional histories with faults.

`txn_history.py` (the tool) starts its own `tmsgate serve` (Kafka + HTTP listeners), runs
transactional, plain, TMS-header (HTTP) and exactly-once writers as subprocesses, SIGKILLs
writers and the gateway at random, follows every topic with read_committed and
read_uncommitted consumers, and checks the outcome (see its docstring). Here it runs for
about a minute with a fixed seed and every count must be 0:

    .venv/bin/pytest compat-tests/test_txn_history.py -s      # -s shows the summary

A long run (same tool, any seed; the summary JSON goes to stdout, progress to stderr, the
work dir with the store, gateway.log, writer logs and history.json is kept on a failure):

    .venv/bin/python compat-tests/txn_history.py --duration 600 --seed 7
    .venv/bin/python compat-tests/txn_history.py --duration 3600 --gateway-kill-every 60 \\
        --writer-kill-every 4 --txn-writers 4 --topics 6 --workdir /tmp/history
    .venv/bin/python compat-tests/txn_history.py recheck /tmp/history   # re-run the checks

Against an Apache Kafka (no HTTP API, no gateway kills; Kafka's read_uncommitted sees open
and aborted records, which --real-kafka allows):

    .venv/bin/python compat-tests/txn_history.py --bootstrap 127.0.0.1:9092 --real-kafka

`test_checker_catches` feeds the checker a small hand-made history with one violation of
each kind, so a checker that stopped seeing them fails here too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from history_run import run_history

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import txn_history  # noqa: E402

SEED = 20261123
DURATION_S = 50
TIMEOUT_S = 240


@pytest.mark.timeout(300)
def test_random_histories_with_kills(tmp_path):
    if os.environ.get("TMSGATE_COMPAT_BOOTSTRAP"):
        pytest.skip("kills its own gateway: needs `tmsgate serve` started by the test")
    options = [
        "--duration",
        str(DURATION_S),
        "--seed",
        str(SEED),
    ]
    run = run_history(tmp_path, options, TIMEOUT_S, "txn_history")
    counts, stats = run.counts, run.stats
    keys = [
        "kafka_txns",
        "kafka_txn_committed",
        "kafka_txn_aborted_on_purpose",
        "kafka_txn_unknown",
        "http_txns",
        "http_txn_committed",
        "http_txn_never",
        "plain_acked",
        "eos_inputs",
        "eos_outputs",
        "gateway_kills",
        "writer_kills",
        "lso_probes",
        "records_final_rc1",
        "records_final_ru",
    ]
    run.report(f"txn_history, seed {SEED}", keys)
    where = run.where(SEED, "store, gateway.log, logs/, history.json")
    assert all(v == 0 for v in counts.values()), f"violations {counts}; {where}"
    assert not run.summary["problems"], f"{run.summary['problems']}; {where}"
    # enough happened for the zeros to mean something
    assert stats.get("kafka_txn_committed", 0) >= 50, stats
    assert stats.get("kafka_txn_aborted_on_purpose", 0) >= 1, stats
    assert stats.get("http_txn_committed", 0) >= 10, stats
    assert stats.get("http_txn_never", 0) >= 1, stats
    assert stats.get("plain_acked", 0) >= 100, stats
    assert stats.get("eos_outputs", 0) >= 50, stats
    assert stats["gateway_kills"] >= 1 and stats["writer_kills"] >= 1, stats
    assert stats.get("lso_probes", 0) >= 10, stats


# --------------------------------------------------------------------------- the checker


def _history() -> dict:
    """A tiny consistent history over topics a, b (+ EOS in/out); check() finds nothing."""
    rc = {
        "a": [
            (0, {"r": "pl0.1:1"}, None),
            (1, {"r": "tx0.1:1/0", "x": "tx0.1:1"}, None),
            (2, {"r": "tx0.1:1/1", "x": "tx0.1:1"}, None),
            (3, {"r": "ht0.1:1/0", "x": "ht0.1:1"}, None),
        ],
        "b": [
            (0, {"r": "tx0.1:1/2", "x": "tx0.1:1"}, None),
            (1, {"r": "pl0.1:2"}, None),
        ],
        "in": [(0, {"r": "plin.1:1"}, None), (1, {"r": "plin.1:2"}, None)],
        "out": [
            (0, {"r": "eos:0", "s": 0, "src": "plin.1:1"}, None),
            (1, {"r": "eos:1", "s": 1, "src": "plin.1:2"}, None),
        ],
    }
    ru = {t: list(v) for t, v in rc.items()}
    # an aborted TMS header record stays in the log: read_uncommitted may see it
    ru["b"] = [*ru["b"], (2, {"r": "ht0.1:2/0", "x": "ht0.1:2"}, None)]
    logs = {
        "tx0": [
            [
                {
                    "ev": "begin",
                    "x": "tx0.1:1",
                    "t": 1.0,
                    "intent": "commit",
                    "recs": [["a", "tx0.1:1/0"], ["a", "tx0.1:1/1"], ["b", "tx0.1:1/2"]],
                },
                {"ev": "committing", "x": "tx0.1:1", "t": 2.0},
                {"ev": "committed", "x": "tx0.1:1", "t": 2.1},
                {
                    "ev": "begin",
                    "x": "tx0.1:2",
                    "t": 3.0,
                    "intent": "abort",
                    "recs": [["a", "tx0.1:2/0"]],
                },
                {"ev": "aborting", "x": "tx0.1:2", "t": 3.1},
                {"ev": "aborted", "x": "tx0.1:2", "t": 3.2},
            ]
        ],
        "pl0": [
            [
                {"ev": "ack", "r": "pl0.1:1", "tp": "a", "o": 0},
                {"ev": "ack", "r": "pl0.1:2", "tp": "b", "o": 1},
            ]
        ],
        "ht0": [
            [
                {
                    "ev": "begin",
                    "x": "ht0.1:1",
                    "wp": 11,
                    "t": 1.5,
                    "t_ask": 1.4,
                    "t_got": 1.45,
                    "intent": "commit",
                    "recs": [["a", "ht0.1:1/0", "k"]],
                },
                {"ev": "committing", "x": "ht0.1:1", "wp": 11, "t": 2.5},
                {"ev": "committed", "x": "ht0.1:1", "wp": 11, "t": 2.6},
                {
                    "ev": "begin",
                    "x": "ht0.1:2",
                    "wp": 12,
                    "t": 4.0,
                    "t_ask": 3.9,
                    "t_got": 3.95,
                    "intent": "abort",
                    "recs": [["b", "ht0.1:2/0", "k"]],
                },
                {"ev": "aborted", "x": "ht0.1:2", "wp": 12, "t": 4.1},
            ]
        ],
        "plin": [
            [
                {"ev": "ack", "r": "plin.1:1", "tp": "in", "o": 0},
                {"ev": "ack", "r": "plin.1:2", "tp": "in", "o": 1},
            ]
        ],
    }
    return {
        "topics": ["a", "b"],
        "eos_in": "in",
        "eos_out": "out",
        "logs": logs,
        "kinds": {"tx0": "txn", "pl0": "plain", "ht0": "http", "plin": "plain"},
        "http_states": {"ht0.1:1": "committed", "ht0.1:2": "aborted"},
        "final": {"rc1": rc, "rc2": {t: list(v) for t, v in rc.items()}, "ru": ru},
        "live": {
            "rc": [
                ("a", 0, "pl0.1:1", 0.5),
                ("a", 1, "tx0.1:1/0", 2.05),
                ("a", 2, "tx0.1:1/1", 2.05),
                ("a", 3, "ht0.1:1/0", 2.7),
            ],
            "ru": [
                ("b", 0, "tx0.1:1/2", 2.05),
                ("b", 1, "pl0.1:2", 2.2),
                ("b", 2, "ht0.1:2/0", 4.05),  # an open TMS header record: allowed
            ],
        },
        "probes": [{"x": "tx0.1:1", "seen_tp": "a", "t_seen": 2.05, "t_q": 2.06, "lso": {"b": 1}}],
        "eos_group_offset": 2,
        "real_kafka": False,
    }


def _drop(view: list, rid: str) -> list:
    return [r for r in view if r[1]["r"] != rid]


def _mut_torn(h):
    h["final"]["rc2"]["b"] = _drop(h["final"]["rc2"]["b"], "tx0.1:1/2")


def _mut_lost_txn(h):
    for t in ("a", "b"):
        for v in ("rc1", "rc2", "ru"):
            h["final"][v][t] = [r for r in h["final"][v][t] if r[1].get("x") != "tx0.1:1"]


def _mut_lost_plain(h):
    h["final"]["ru"]["a"] = _drop(h["final"]["ru"]["a"], "pl0.1:1")


def _mut_aborted_kafka_ru(h):
    h["final"]["ru"]["a"].append((9, {"r": "tx0.1:2/0", "x": "tx0.1:2"}, None))


def _mut_aborted_http_rc(h):
    h["live"]["rc"].append(("b", 2, "ht0.1:2/0", 4.2))


def _mut_uncommitted(h):
    h["live"]["rc"][3] = ("a", 3, "ht0.1:1/0", 2.4)  # before its commit was asked (2.5)


def _mut_torn_live(h):
    h["probes"][0]["lso"]["b"] = 0  # b's part not readable after a's was seen


def _mut_duplicate(h):
    h["final"]["rc1"]["a"].append((4, {"r": "pl0.1:1"}, None))


def _mut_eos_duplicate(h):
    h["final"]["rc1"]["out"].append((2, {"r": "eos:0", "s": 0, "src": "plin.1:1"}, None))


def _mut_eos_lost(h):
    h["final"]["rc1"]["out"] = h["final"]["rc1"]["out"][:1]


def _mut_wp_back(h):
    # a start asked after another was answered got a write pointer not above it (a new
    # controller handing out pointers again)
    h["logs"]["ht0"][0][3]["wp"] = 11


def _mut_order(h):
    a = h["final"]["rc2"]["a"]
    a[0], a[1] = (0, a[1][1], None), (1, a[0][1], None)


@pytest.mark.parametrize(
    "mutate, expect",
    [
        (None, None),
        (_mut_torn, "torn"),
        (_mut_lost_txn, "acknowledged_lost"),
        (_mut_lost_plain, "acknowledged_lost"),
        (_mut_aborted_kafka_ru, "aborted_read"),
        (_mut_aborted_http_rc, "aborted_read"),
        (_mut_uncommitted, "uncommitted_read"),
        (_mut_torn_live, "torn"),
        (_mut_duplicate, "duplicate"),
        (_mut_eos_duplicate, "eos_duplicate"),
        (_mut_eos_lost, "eos_lost"),
        (_mut_order, "order_mismatch"),
        (_mut_wp_back, "wp_not_increasing"),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_checker_catches(mutate, expect):
    h = _history()
    if mutate is not None:
        mutate(h)
    counts, examples, _ = txn_history.check(h)
    if expect is None:
        assert all(v == 0 for v in counts.values()), (counts, examples)
    else:
        assert counts[expect] >= 1, (counts, examples)
