"""The history checker's workers mode: ``txn_history.py --workers 3``.

One ``tmsgate serve --workers 3`` (gateway/workers.py: a parent owning the LevelDB store in
the work dir and serving its rows on a Unix socket, three worker processes, each a
``--cluster`` gateway with node ids 0..2) on fixed Kafka and HTTP ports, the ones every
client bootstraps at. The writers, consumers and checks are txn_history.py's, the fault
schedule and settling are txn_history_cluster.py's ``ClusterHistory`` with these changes:

- the gateway faults go round three kinds (kill -9 each time): the CONTROLLER worker (the
  child of the parent whose ``--node-id`` Metadata names as controller), another worker,
  and the PARENT. A killed worker is not restarted here: the parent starts it again by
  itself (releasing its leases first), and the checker only waits until Metadata names
  three brokers and one controller again (and notes who took the controller over). A
  killed parent takes its workers with it (PR_SET_PDEATHSIG): once they are gone, the
  checker starts ``tmsgate serve --workers 3`` again on the same store and ports;
- the TMS HTTP writers call the one shared HTTP port: the worker that accepts a write for
  a topic another worker leads sends it on (gateway/http/forward.py). A 421 that still
  reaches a writer is logged (``http_421``) and counted in the stats, as are the writes
  answered 504 because the worker they were sent on to was killed with them
  (``http_504_outcome_unknown``: the writer aborts their transaction);
- before the final reads the parent is killed (-9) once more and started again;
- the clients that lived through the mid-run kill of the parent (the live consumers, the
  transactional and EOS writers running then) must carry on after its restart: records
  seen, transactions committed (``after_parent_restart``); if not, a problem;
- found, not caused: a worker the parent reports dead (``exited with``) that we did not
  kill, or a worker outliving its killed parent, is a problem (the run fails).

    .venv/bin/python compat-tests/txn_history.py --workers 3 --duration 120 --seed 7

Work dir: ``store/``, ``gateway.log`` (the parent's and all workers' output), txn_history's.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import time
from pathlib import Path

import httpx
import txn_history as th
from txn_history_cluster import ClusterHistory

SETTLE_S = 90.0  # a (re)started serve: three workers booted, Metadata agreeing
TAKEOVER_S = 60.0  # a live worker taking the controller over from a killed one
ORPHAN_S = 15.0  # workers gone after their parent's kill -9 (PR_SET_PDEATHSIG)
STOP_S = 75.0  # a SIGTERM'd parent stops its workers (grace 30 s, then 45 s, workers.py)
# the gateway kills go round these; the parent's in the middle, so that the clients that
# lived through it go on writing for a while before the run ends
ROLES = ("controller", "parent", "other")
FIRST_ROUND = (0.12, 0.4, 0.7)  # by these shares of the run at the latest
EXITED = re.compile(r"worker \d+ \(node (\d+), pid (\d+)\) exited with")


# =========================================================================== processes


def children_of(pid: int) -> set[int]:
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out.update(int(c) for c in (task / "children").read_text().split())
    return out


def alive(pid: int) -> bool:
    """Running (a zombie not reaped yet counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def node_id_of(pid: int) -> int | None:
    """A worker's node id: the last ``--node-id`` of its command line (the parent appends
    its own after the operator's arguments)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return None
    if "--node-id" not in args:
        return None
    return int(args[len(args) - 1 - args[::-1].index("--node-id") + 1])


def metadata_at(bootstrap: str, timeout_s: float = 3.0) -> tuple[int, dict[int, str]] | None:
    """(controller id, {broker id: host:port}) in Metadata asked at ``bootstrap``. Short:
    a worker's port accepts (the parent bound it) long before the worker answers."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **th._quiet()})
    try:
        md = admin.list_topics(timeout=timeout_s)
    except Exception:
        return None
    return md.controller_id, {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


class WorkersServe(th.GatewayProc):
    """``tmsgate serve --workers N`` over ``<workdir>/store``; restarts keep the ports."""

    def __init__(self, workdir: Path, count: int, extra_args: list[str]) -> None:
        super().__init__(workdir, http=True, extra_args=["--workers", str(count), *extra_args])
        self.count = count
        self.seen: set[int] = set()  # every worker pid seen: none may outlive the run

    def workers(self) -> dict[int, int]:
        """The live workers: {node id: pid}."""
        if self.proc is None or self.proc.poll() is not None:
            return {}
        out = {}
        for pid in children_of(self.proc.pid):
            node = node_id_of(pid)
            if node is not None and alive(pid):
                out[node] = pid
        self.seen |= set(out.values())
        return out

    def kill9(self) -> list[int]:
        """Kill the parent; -> the workers that outlived it by ORPHAN_S (killed then)."""
        if self.proc is not None:
            self.workers()
        super().kill9()
        end = th.mono() + ORPHAN_S
        while th.mono() < end and any(alive(p) for p in self.seen):
            time.sleep(0.05)
        return self.kill_leftovers()

    def stop(self) -> None:
        if self.proc is not None:
            self.workers()
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                self.proc.wait(STOP_S)
            except Exception:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None
        self.kill_leftovers()

    def kill_leftovers(self) -> list[int]:
        left = [p for p in self.seen if alive(p)]
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return left


# =========================================================================== orchestrator


class WorkersHistory(ClusterHistory):
    """History over one ``serve --workers N`` (the module docstring)."""

    def __init__(self, a) -> None:
        super().__init__(a)
        self.serve: WorkersServe | None = None
        self.killed_pids: set[int] = set()
        self.after_restart: dict = {}

    # ------------------------------------------------------------------ gateways
    def start_gateway(self) -> None:
        a = self.a
        self.serve = self.gw = WorkersServe(self.workdir, a.workers, list(a.gateway_arg or []))
        self.serve.start()
        self.bootstrap, self.http = self.serve.bootstrap, self.serve.http_url
        ctl = self.settle()
        if ctl is None:
            raise RuntimeError(f"the workers did not agree on a controller: {self.problems}")
        self.log(
            f"{a.workers} workers up (pids {self.serve.workers()}), kafka {self.bootstrap} "
            f"http {self.http}, controller {ctl}"
        )

    def http_urls(self) -> list[str]:
        return [self.http] if self.http else []

    def can_kill_gateways(self) -> bool:
        return self.serve is not None

    def settle(self, deadline_s: float = SETTLE_S, not_these: frozenset[int] = frozenset()):
        """Wait until N workers run (none of ``not_these``), Metadata at the shared port and
        at each worker's own names the N brokers and one controller among them, and the
        shared HTTP port is ready: -> the controller id (None, a problem noted, if not
        within ``deadline_s``)."""
        t0 = th.mono()
        waited_for = None  # the last thing not ready yet: logged when settling was slow
        while True:
            ctl, last = self.agreed(not_these)
            if ctl is not None:
                if th.mono() - t0 > 5:
                    self.log(f"settled after {th.mono() - t0:.1f}s; last waited for {waited_for}")
                return ctl
            waited_for = last
            if th.mono() > t0 + deadline_s:
                self.problems.append(f"the workers did not settle within {deadline_s}s: {last}")
                return None
            time.sleep(0.3)

    def agreed(self, not_these: frozenset[int]) -> tuple[int | None, object]:
        """-> (the controller every view names, or None; what was seen last)."""
        assert self.serve is not None
        want = set(range(self.serve.count))  # node ids 0..N-1 (--node-id's default 0 + i)
        pids = self.serve.workers()
        if set(pids) != want or set(pids.values()) & not_these:
            return None, ("workers", pids)
        try:  # the cheap question first: is any worker serving yet?
            ready = httpx.get(f"{self.http}/readyz", timeout=2).status_code
        except httpx.HTTPError as exc:
            return None, ("readyz", repr(exc))
        if ready != 200:
            return None, ("readyz", ready)
        shared = metadata_at(self.bootstrap)
        if shared is None or set(shared[1]) != want or shared[0] not in want:
            return None, ("metadata", shared)
        views = [metadata_at(addr) for addr in shared[1].values()]
        if not all(v is not None and v[0] == shared[0] and set(v[1]) == want for v in views):
            return None, ("views", views)
        return shared[0], ("agreed", shared)

    def first_gateway_kill(self, start: float, end: float) -> float:
        self.kills_from, self.kills_span = start, end - start
        return self.next_gateway_kill(start, end)

    def next_gateway_kill(self, now: float, end: float) -> float:
        """Every --gateway-kill-every s on average, the first round of the three kinds by
        FIRST_ROUND's shares of the run (a worker kill costs ~3 s, the parent's ~8)."""
        wait = now + self.rng.uniform(0.6, 1.4) * self.a.gateway_kill_every
        if self.gateway_kills < len(FIRST_ROUND):
            return min(wait, self.kills_from + FIRST_ROUND[self.gateway_kills] * self.kills_span)
        return wait

    def kill_gateway(self) -> None:
        role = ROLES[self.gateway_kills % len(ROLES)]
        ctl = self.settle()
        if ctl is None:
            self.notes.append(f"no {role} kill: the workers had not settled")
            return
        self.gateway_kills += 1
        self.kinds_killed[role] += 1
        if role == "parent":
            self.kill_parent(ctl, "parent")
        else:
            self.kill_worker(ctl, role)

    def kill_worker(self, ctl: int, role: str) -> None:
        """kill -9 of one worker; the parent starts it again, we only wait for it."""
        assert self.serve is not None
        pids = self.serve.workers()
        node = ctl if role == "controller" else self.rng.choice(sorted(set(pids) - {ctl}))
        pid = pids[node]
        os.kill(pid, signal.SIGKILL)
        t_kill = th.mono()
        self.killed_pids.add(pid)
        fault = {"t": t_kill, "node": node, "pid": pid, "role": role, "controller_before": ctl}
        self.faults.append(fault)
        self.log(f"SIGKILL worker node {node} pid {pid} ({role}; controller was {ctl})")
        if role == "controller":
            new = self.wait_controller_after(node, pid)
            fault["controller_after"] = new
            fault["takeover_s"] = round(th.mono() - t_kill, 2)
            self.log(f"node {new} is the controller after {fault['takeover_s']}s")
        fault["controller_when_settled"] = self.settle(not_these=frozenset({pid}))
        fault["restarted_pid"] = self.serve.workers().get(node)
        fault["down_s"] = round(th.mono() - t_kill, 2)
        self.log(f"worker node {node} running again (pid {fault['restarted_pid']})")

    def wait_controller_after(self, dead_node: int, dead_pid: int) -> int | None:
        """The controller Metadata names once the killed one is gone: another worker, or
        the killed node's next run (whichever took the lease first; seen once all agree,
        a live worker's view may name the dead node for a moment)."""
        end = th.mono() + TAKEOVER_S
        for tries in itertools.count():
            if th.mono() > end:
                break
            md = metadata_at(self.bootstrap)
            if md is not None and md[0] not in (dead_node, -1):
                return md[0]
            if tries % 5 == 4:
                ctl, _ = self.agreed(frozenset({dead_pid}))
                if ctl is not None:
                    return ctl
            time.sleep(0.2)
        self.notes.append(f"no worker took the controller over from {dead_node} in {TAKEOVER_S}s")
        return None

    def kill_parent(self, ctl: int | None, role: str) -> None:
        """kill -9 of the store's owner: its workers die with it; started again here."""
        assert self.serve is not None
        workers = self.serve.workers()
        # the writers running now: did they go on after the restart? (after_parent_restart)
        survivors = [
            f"{s.name}.{s.incarnation}"
            for s in self.slots.values()
            if s.proc is not None and s.proc.poll() is None
        ]
        left = self.serve.kill9()
        t_kill = th.mono()
        fault = {"t": t_kill, "node": "parent", "role": role, "controller_before": ctl}
        fault["survivors"] = survivors
        self.faults.append(fault)
        if left:
            self.problems.append(f"workers {left} outlived their parent's kill -9 by {ORPHAN_S}s")
        self.log(f"SIGKILL the parent ({role}; its workers {workers}); starting it again")
        time.sleep(self.rng.uniform(0.2, 1.5))
        self.serve.start()
        fault["controller_after"] = self.settle()
        fault["t_up"] = th.mono()
        fault["down_s"] = round(th.mono() - t_kill, 2)
        self.log(f"serve --workers running again: controller {fault['controller_after']}")

    def eos_group_offset(self) -> int | None:
        """Asked again for up to 30 s (a group's coordinator slot may move between workers
        just after a restart); an answer never got is noted."""
        from confluent_kafka import Consumer, TopicPartition

        end, error = th.mono() + 30, None
        while th.mono() < end:
            c = Consumer(
                {"bootstrap.servers": self.bootstrap, **th._quiet(), "group.id": self.eos_group}
            )
            try:
                (tp,) = c.committed([TopicPartition(self.eos_in, 0)], timeout=10)
                return tp.offset
            except Exception as exc:
                error = exc
            finally:
                c.close()
        self.notes.append(f"the EOS group's committed offset: no answer in 30 s ({error!r})")
        return None

    def supervise(self) -> None:
        super().supervise()
        s = self.serve
        if s is not None and s.proc is not None and s.proc.poll() is not None:
            self.problems.append(f"the parent exited by itself ({s.proc.returncode})")
            self.log(f"the parent exited by itself ({s.proc.returncode}); starting it again")
            s.kill9()
            s.start()

    def gateway_up(self) -> None:
        s = self.serve
        if s is not None and (s.proc is None or s.proc.poll() is not None):
            s.kill9()
            s.start()
        if s is not None:
            self.settle()

    def final_gateway_crash(self) -> None:
        self.kill_parent(self.settle(), "all")

    def stop_gateways(self) -> None:
        if self.serve is not None:
            self.serve.stop()
        # here: finish() copies the problems next
        exits = self.worker_exits_not_ours()
        if exits:
            self.problems.append(f"workers exited without being killed: {exits[:5]}")
        self.after_restart = after = self.after_parent_restart()
        stuck = [
            k
            for k in ("live_records_after_parent_restart", "survivor_commits_after_parent_restart")
            if k in after and after[k] == 0
        ]
        if stuck:
            self.problems.append(
                f"the clients that lived through the parent's kill -9 did nothing after its "
                f"restart ({', '.join(stuck)} = 0; survivors {after.get('parent_kill_survivors')}"
                "): the workers' own Kafka ports are new at each start of serve --workers and "
                "these clients (metadata.recovery.strategy=none) know only the old ones"
            )

    def cleanup(self) -> None:
        super().cleanup()
        if self.serve is not None:
            self.serve.kill9()

    # ------------------------------------------------------------------ stats
    def worker_exits_not_ours(self) -> list[str]:
        """The parent's ``worker ... exited with`` lines for pids we did not kill."""
        with contextlib.suppress(OSError):
            text = self.serve.log_path.read_text(errors="replace") if self.serve else ""
            return [
                m.group(0) for m in EXITED.finditer(text) if int(m.group(2)) not in self.killed_pids
            ]
        return []

    def cluster_stats(self) -> dict:
        faults = self.faults
        events = [e for s in self.slots.values() for logp in s.logs for e in th.read_log(logp)]
        http_421 = sum(1 for e in events if e["ev"] == "http_421")
        # a write sent on to a worker killed with it: answered 504, the transaction aborted
        http_504 = sum(1 for e in events if e["ev"] == "publish_error" and e.get("status") == 504)
        return {
            "workers": self.a.workers,
            "controller_kills": self.kinds_killed["controller"],
            "other_worker_kills": self.kinds_killed["other"],
            "parent_kills": self.kinds_killed["parent"],
            "final_parent_kills": sum(1 for f in faults if f["role"] == "all"),
            "worker_restarts_by_parent": sum(
                1 for f in faults if f["role"] in ("controller", "other") and f.get("restarted_pid")
            ),
            "controller_moved": sum(
                1
                for f in faults
                if f["role"] == "controller"
                and f.get("controller_after") not in (None, f["controller_before"])
            ),
            "parent_restarts_settled": sum(
                1
                for f in faults
                if f["role"] in ("parent", "all") and f.get("controller_after") is not None
            ),
            "http_421": http_421,
            "http_504_outcome_unknown": http_504,
            **self.after_restart,
            "gateway_faults": [
                {k: v for k, v in f.items() if k not in ("t", "t_up", "survivors")} for f in faults
            ],
        }

    def after_parent_restart(self) -> dict:
        """What the clients that lived through the mid-run kill of the parent did after
        its restart, until the next parent kill: records the live consumers (bootstrapped
        at the start) saw, and transactions the writers running at the kill committed. A
        client that only knows the killed run's brokers (librdkafka with
        metadata.recovery.strategy=none, as here) cannot find the new run's."""
        kills = [f for f in self.faults if f["role"] == "parent" and "t_up" in f]
        if not kills:
            return {}
        out = {"live_records_after_parent_restart": 0, "survivor_commits_after_parent_restart": 0}
        up = kills[0]["t_up"]
        until = min([f["t"] for f in self.faults if f["t"] > up] + [float("inf")])
        live = getattr(self, "live", {}) or {}
        out["live_records_after_parent_restart"] = sum(
            1 for c in live.values() for *_, t in c.records if up < t < until
        )
        survivors = set(kills[0]["survivors"])
        out["parent_kill_survivors"] = sorted(survivors)
        # Kafka clients only: an HTTP writer makes a new producer after an error
        logs = [
            logp
            for s in self.slots.values()
            if s.kind in ("txn", "eos")
            for i, logp in enumerate(s.logs, 1)
            if f"{s.name}.{i}" in survivors
        ]
        if not logs:
            del out["survivor_commits_after_parent_restart"]  # none to ask
        for logp in logs:
            out["survivor_commits_after_parent_restart"] += sum(
                1
                for e in th.read_log(logp)
                if e["ev"] == "committed" and up < e.get("t", 0) < until
            )
        return out
