"""The history checker's cluster mode: ``txn_history.py --cluster 3``.

Three ``tmsgate serve --cluster --node-id i --lease-ms 2000`` processes (Kafka and HTTP
listeners on fixed free ports) share one ``hbase://`` store: ``--store-url``, or the HBase
Thrift 1 stand-in (tests/hbase_standin.py, not HBase) started here in a process of its own
with enough worker threads for every gateway's connection pool. The writers, consumers and
checks are txn_history.py's; what changes:

- every client's bootstrap lists the three gateways; the TMS HTTP writers (``ht*``) spread
  their calls over the gateways' HTTP URLs (``HttpGateways``): a transaction starts on a
  random gateway (which forwards it to the controller), each publish goes to a random one
  and follows the 421's ``leaderUrl`` to the topic's leader, the commit goes to another;
- the gateway faults alternate: kill -9 of the CONTROLLER (Metadata's controller id, asked
  of every live gateway), restarted on its ports and node id once another gateway has
  taken the controller over (a real failover, not the same node coming back to its own
  lease), then kill -9 of a random other gateway, restarted after 0.5-3 s;
- before the final reads, all three are killed (-9) and restarted: whatever was
  acknowledged is in the store, whichever gateway answered it;
- one more check (txn_history.check, every mode): ``wp_not_increasing``, write pointers
  strictly increase across failovers (``check_write_pointers``).

    .venv/bin/python compat-tests/txn_history.py --cluster 3 --duration 120 --seed 7
    .venv/bin/python compat-tests/txn_history.py --cluster 3 \\
        --store-url 'hbase://127.0.0.1:9090/hist?pool_size=4' --duration 600

Work dir: ``node<i>/gateway.log`` per gateway, ``hbase-standin.log``, and txn_history's.
"""

from __future__ import annotations

import contextlib
import random
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import txn_history as th

STANDIN = Path(__file__).resolve().parent.parent / "tests" / "hbase_standin.py"
STANDIN_WORKERS = 64  # 3 gateways x pool_size 8, plus room: HBase's minWorkerThreads
SETTLE_S = 60.0  # deadline for a (re)started cluster to agree on brokers and controller
TAKEOVER_S = 60.0  # deadline for a survivor to take the controller over
UNAVAILABLE_RETRY_S = 30.0  # an HTTP writer retries a 503 (no controller now) this long


# =========================================================================== HTTP writers


class HttpGateways:
    """A TMS HTTP writer's view of the gateways: POST to a random one (or one given), on to
    the next when a connection is refused (nothing was sent), to the 421's ``leaderUrl``
    when a topic is led elsewhere. A call that may be repeated (``idempotent``: a start,
    whose lost answer only leaves a transaction to time out; a commit or abort, which
    answers 409 with the state when asked again) is also sent again, to another gateway,
    after a 503 (no controller right now) or a connection lost before the answer (its
    gateway killed). Anything else is the caller's to judge. One URL: a single gateway,
    the same calls."""

    def __init__(
        self, urls: list[str], rng: random.Random, timeout_s: float = 10.0, log=None
    ) -> None:
        self.urls = list(urls)
        self.rng = rng
        self.log = log  # a writer's Log: each 421 followed is logged (``http_421``)
        self.client = httpx.Client(timeout=timeout_s)

    def pick(self, avoid: str | None = None) -> str:
        others = [u for u in self.urls if u != avoid] or self.urls
        return self.rng.choice(others)

    def post(
        self,
        path: str,
        *,
        at: str | None = None,
        idempotent: bool = False,
        deadline_s: float = UNAVAILABLE_RETRY_S,
        **kw,
    ) -> tuple[httpx.Response, str, float]:
        """-> (answer, the URL that gave it, monotonic time that attempt was sent)."""
        end = th.mono() + deadline_s
        url = at or self.pick()
        while True:
            t_ask = th.mono()
            try:
                r = self.client.post(url + path, **kw)
            except httpx.TransportError as exc:
                # refused: nothing was sent; lost: maybe applied, so only when idempotent
                sent = not isinstance(exc, httpx.ConnectError)
                if th.mono() > end or (sent and not idempotent):
                    raise
                url = self.pick(avoid=url)
                time.sleep(0.1)
                continue
            if r.status_code == 421 and th.mono() < end:  # not stored: send it to the leader
                leader = None
                with contextlib.suppress(ValueError, AttributeError):
                    leader = r.json().get("leaderUrl")
                if self.log is not None:
                    self.log(
                        "http_421", path=path, gw=url, leader=leader, body=r.text[:200], t=th.mono()
                    )
                url = leader or self.pick(avoid=url)
                time.sleep(0.05 if leader else 0.3)
                continue
            if r.status_code == 503 and idempotent and th.mono() < end:
                time.sleep(0.3)
                url = self.pick(avoid=url)
                continue
            return r, url, t_ask


# =========================================================================== processes


class Standin:
    """tests/hbase_standin.py in a process of its own (killing a gateway leaves whatever
    part of a write reached the store)."""

    def __init__(self, workdir: Path, workers: int = STANDIN_WORKERS) -> None:
        self.log_path = workdir / "hbase-standin.log"
        self.workers = workers
        self.proc: subprocess.Popen | None = None
        self.address = ""

    def start(self) -> str:
        cmd = [sys.executable, str(STANDIN), "--port", "0"]
        help_text = subprocess.run(
            [*cmd[:2], "--help"], capture_output=True, text=True, check=False
        ).stdout
        if "--min-worker-threads" in help_text:
            cmd += ["--min-worker-threads", str(self.workers)]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:  # it prints its address once it listens
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout=th.START_TIMEOUT_S):
                raise RuntimeError(f"the HBase stand-in did not listen; see {self.log_path}")
        self.address = self.proc.stdout.readline().decode().split(" on ", 1)[1].split(";")[0]
        return self.address

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


class ClusterNode(th.GatewayProc):
    """One ``tmsgate serve --cluster`` on the shared store; restarts keep ports and node id."""

    def __init__(self, workdir: Path, node_id: int, store_url: str, lease_ms: int) -> None:
        cluster = ["--cluster", "--node-id", str(node_id), "--lease-ms", str(lease_ms)]
        super().__init__(workdir, http=True, extra_args=cluster)
        self.node_id = node_id
        self.store_url = store_url
        self.kills = 0

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--store") + 1] = self.store_url
        return cmd

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def controller_seen_by(node: ClusterNode) -> tuple[int, int] | None:
    """(controller id, brokers listed) in the Metadata of ``node`` (asked of it alone)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": node.bootstrap, **th._quiet()})
    try:
        md = admin.list_topics(timeout=5)
    except Exception:
        return None
    return md.controller_id, len(md.brokers)


def distinct_free_ports(k: int) -> list[int]:
    """k free ports, all different (each held until all are found: free_port() called k
    times in a row may hand out one port twice)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(k):
            s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def start_all(nodes: list[ClusterNode]) -> None:
    """Start the nodes at once (each start waits for its listeners)."""
    errors: list[BaseException] = []

    def one(n: ClusterNode) -> None:
        try:
            n.start()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# =========================================================================== orchestrator


class ClusterHistory(th.History):
    """History over ``--cluster N`` gateways (the module docstring)."""

    def __init__(self, a) -> None:
        super().__init__(a)
        self.nodes: list[ClusterNode] = []
        self.standin: Standin | None = None
        self.kinds_killed: Counter = Counter()

    # ------------------------------------------------------------------ gateways
    def start_gateway(self) -> None:
        a = self.a
        store = a.store_url
        if not store:
            self.standin = Standin(self.workdir)
            store = f"hbase://{self.standin.start()}/hist"
        self.nodes = [
            ClusterNode(self.workdir / f"node{i}", i, store, a.lease_ms) for i in range(a.cluster)
        ]
        ports = distinct_free_ports(2 * len(self.nodes))
        for n in self.nodes:
            n.kafka_port, n.http_port = ports.pop(), ports.pop()
        start_all(self.nodes)
        self.bootstrap = ",".join(n.bootstrap for n in self.nodes)
        self.http = self.nodes[0].http_url
        ctl = self.settle()
        if ctl is None:
            raise RuntimeError(f"the gateways did not agree on a controller: {self.problems}")
        self.log(f"{a.cluster} gateways up on {store}: kafka {self.bootstrap}, controller {ctl}")

    def http_urls(self) -> list[str]:
        return [n.http_url for n in self.nodes]

    def can_kill_gateways(self) -> bool:
        return bool(self.nodes)

    def settle(self, deadline_s: float = SETTLE_S) -> int | None:
        """Wait until every live node lists the live brokers and names one controller
        (its id; None, and a problem noted, if they did not within ``deadline_s``)."""
        end = th.mono() + deadline_s
        last = None
        while th.mono() < end:
            live = [n for n in self.nodes if n.alive()]
            views = [controller_seen_by(n) for n in live]
            last = views
            ids = {n.node_id for n in live}
            agreed = all(v is not None and v[1] == len(live) and v[0] in ids for v in views)
            if agreed and len({v[0] for v in views}) == 1:
                return views[0][0]
            time.sleep(0.3)
        self.problems.append(f"the gateways did not agree within {deadline_s}s: {last}")
        return None

    def first_gateway_kill(self, start: float, end: float) -> float:
        # the controller by a quarter of the run, another gateway by about 55%
        span = end - start
        return start + min(0.25 * span, self.rng.uniform(0.6, 1.4) * self.a.gateway_kill_every)

    def next_gateway_kill(self, now: float, end: float) -> float:
        wait = self.rng.uniform(0.6, 1.4) * self.a.gateway_kill_every
        if self.gateway_kills == 1:
            wait = min(wait, 0.3 * (end - self.t0))
        return now + wait

    def kill_gateway(self) -> None:
        """Alternately the controller and another gateway (kill -9), restarted on its ports
        and node id."""
        role = "controller" if self.gateway_kills % 2 == 0 else "other"
        ctl = self.settle()
        live = [n for n in self.nodes if n.alive()]
        pick = [n for n in live if (n.node_id == ctl) == (role == "controller")]
        if ctl is None or not pick:
            self.notes.append(f"no {role} gateway to kill (controller {ctl})")
            return
        victim = self.rng.choice(pick)
        victim.kill9()
        t_kill = th.mono()
        victim.kills += 1
        self.gateway_kills += 1
        self.kinds_killed[role] += 1
        fault = {"t": t_kill, "node": victim.node_id, "role": role, "controller_before": ctl}
        self.faults.append(fault)
        self.log(f"SIGKILL gateway {victim.node_id} ({role}; controller was {ctl})")
        if role == "controller":
            # restart only once a survivor took the lease over: a real failover
            new = self.wait_new_controller(victim.node_id)
            fault["controller_after"] = new
            fault["takeover_s"] = round(th.mono() - t_kill, 2)
            self.log(f"gateway {new} is the controller after {fault['takeover_s']}s")
        else:
            time.sleep(self.rng.uniform(0.5, 3.0))
        victim.start()
        fault["down_s"] = round(th.mono() - t_kill, 2)
        self.log(f"gateway {victim.node_id} restarted")

    def wait_new_controller(self, dead: int) -> int | None:
        end = th.mono() + TAKEOVER_S
        while th.mono() < end:
            for n in self.nodes:
                if n.alive():
                    seen = controller_seen_by(n)
                    if seen is not None and seen[0] not in (dead, -1):
                        return seen[0]
            time.sleep(0.2)
        self.notes.append(f"no gateway took the controller over from {dead} in {TAKEOVER_S}s")
        return None

    def supervise(self) -> None:
        super().supervise()
        for n in self.nodes:  # a gateway that died by itself is a finding: restart it
            if n.proc is not None and n.proc.poll() is not None:
                rc = n.proc.returncode
                self.problems.append(f"gateway {n.node_id} exited by itself ({rc})")
                self.log(f"gateway {n.node_id} exited by itself ({rc}); restarting it")
                n.start()

    def gateway_up(self) -> None:
        down = [n for n in self.nodes if not n.alive()]
        if down:
            start_all(down)
        self.settle()

    def final_gateway_crash(self) -> None:
        """Every gateway killed (-9) at once, then all restarted."""
        for n in self.nodes:
            n.kill9()
        self.faults.append({"t": th.mono(), "node": "all", "role": "all"})
        self.log("SIGKILL every gateway; restarting them")
        start_all(self.nodes)
        ctl = self.settle()
        self.log(f"gateways restarted, controller {ctl}")

    def stop_gateways(self) -> None:
        for n in self.nodes:
            n.stop()
        if self.standin is not None:
            self.standin.stop()

    def cleanup(self) -> None:
        super().cleanup()
        for n in self.nodes:
            n.kill9()
        if self.standin is not None:
            self.standin.stop()

    def abort_open_http(self, logp: Path) -> None:
        evs = th.read_log(logp)
        ended = {e["x"] for e in evs if e["ev"] in th.HTTP_ENDS}
        gws = HttpGateways(self.http_urls(), self.rng)
        for e in evs:
            if e["ev"] == "begin" and e["x"] not in ended:
                with contextlib.suppress(Exception):
                    gws.post(f"/v1/transactions/{e['wp']}/abort", idempotent=True)

    def cluster_stats(self) -> dict:
        return {
            "cluster_nodes": len(self.nodes),
            "controller_kills": self.kinds_killed["controller"],
            "other_gateway_kills": self.kinds_killed["other"],
            "controller_takeovers": sum(
                1
                for f in self.faults
                if f["role"] == "controller" and f.get("controller_after") is not None
            ),
            "gateway_faults": [{k: v for k, v in f.items() if k != "t"} for f in self.faults],
        }


# =========================================================================== the check


def check_write_pointers(data: dict, bad, stats: Counter) -> None:
    """wp_not_increasing: every write pointer a TMS writer got from ``POST /v1/transactions``
    is larger than every one whose start was answered before this start was asked (the
    writers' monotonic ``t_ask``/``t_got``; CLOCK_MONOTONIC is one clock for every process
    here), whatever gateway answered and however often the controller moved."""
    starts = []  # (t_ask, t_got, wp, txn)
    for slot, incs in data["logs"].items():
        if data["kinds"][slot] != "http":
            continue
        for evs in incs:
            for e in evs:
                if e["ev"] == "begin" and "t_ask" in e:
                    starts.append((e["t_ask"], e["t_got"], int(e["wp"]), e["x"]))
    by_answer = sorted(starts, key=lambda s: s[1])
    top, top_x, j = -1, None, 0
    for t_ask, _, wp, x in sorted(starts):
        while j < len(by_answer) and by_answer[j][1] < t_ask:
            if by_answer[j][2] > top:
                top, top_x = by_answer[j][2], by_answer[j][3]
            j += 1
        if top < 0:
            continue
        stats["wp_starts_compared"] += 1
        if wp <= top:
            bad("wp_not_increasing", txn=x, wp=wp, t_ask=t_ask, after_txn=top_x, after_wp=top)
    # the controller kills the check spans: a start answered before, one asked after
    for f in data.get("faults", []):
        if f.get("role") not in ("controller", "all", "parent"):  # parent: serve --workers
            continue
        if any(s[1] < f["t"] for s in starts) and any(s[0] > f["t"] for s in starts):
            stats["wp_check_spans_controller_kills"] += 1
