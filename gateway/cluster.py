"""Several gateways over one shared store (``tmsgate serve --cluster --node-id N``).

Every partition (a TMS topic: storage/partitions.py) has one leader at a time, the
gateway holding its lease; every consumer group has one coordinator, the gateway holding
the lease of the group's slot. The leases live in the store's MetadataTable
(storage/leases.py), taken and renewed with check-and-put, so nothing but the store is
shared: no other service to run.

Lease names:
- ``gateway/<node id>``: a live gateway, its holder naming where clients reach it
  (``host:port http-url pid.start``). Its expiry is how the others learn it died.
- ``controller``: the gateway Metadata names as controller; it finishes topic changes a
  crash cut short, runs the cluster's transaction manager (storage/shared_transactions.py)
  and coordinates every transactional id (gateway/cluster_calls.py has why one).
- ``partition/<topic>``: the partition's leader (only the leader writes it).
- ``groups/<slot>``: the coordinator of the consumer groups of one of ``GROUP_SLOTS``
  slots (Kafka's 50 ``__consumer_offsets`` partitions; ``group_slot``).

Every ``lease_ms / RENEWALS_PER_LEASE`` each gateway (``tick``, on an I/O thread):
1. renews its own leases (a lease it cannot renew was taken over: it stops at once);
2. reads every lease (one scan) and every topic's metadata (topics made elsewhere);
3. takes the partitions that should be its own and are free: each partition's gateway
   is chosen among the live ones by rendezvous hashing, so when a gateway joins or dies
   only its share moves. A gateway hands a partition it holds to the gateway it now
   belongs to (release, and the other takes it on its next tick); the controller stays
   where it is while its gateway lives;
4. does the same for the group slots, except that a slot is not released by the tick:
   the tick marks it leaving and the caller (gateway/services.py, on the event loop)
   flushes the slot's queued group writes, drops its groups, then ``release_group_slots``.

Taking a partition settles any write its previous leader left in part and reloads the
partition's state (next offset, producer state, open transactions) from the store, so
the new leader continues the dense offsets exactly (``Store.lead``).

Fencing: a gateway writes a partition only while ``Store.leads`` says so: until its
lease's end less ``margin`` by its own clock. A lease is taken over only once expired by
the taker's clock, so the two never write at once as long as clock skew plus the longest
stall of a write stays under the margin (a fifth of the lease: 2 s of the default 10 s).

The same fencing keeps a group's committed offsets from being lost or going back when its
slot moves. The coordinator writes a slot's rows (group records, committed offsets) only
after ``may_write_group_slot`` says so, asked on the I/O thread right before each batch
(gateway/kafka/groups/writer.py): until the slot's lease ends less the margin, by this
gateway's clock. The next owner takes the slot only once the lease is released or expired
by its clock, and reads the slot's rows after that: so every write of the old owner
(checked before its deadline, landing within the margin) is durable before the new
owner reads, and none lands after. A hand-over orders it explicitly: stop serving the
slot (requests get NOT_COORDINATOR), flush what was queued, stop writing
(``close_group_slots``), flush again (a batch already past its check), drop the groups
from memory, release. An OffsetCommit is acknowledged only once durable, so the new
owner reads every acknowledged offset, and nothing older is written over it later.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import secrets
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tmsgate.storage import Store, TopicId
from tmsgate.storage.leases import Lease, LeaseTable

log = logging.getLogger("tmsgate.cluster")

RENEWALS_PER_LEASE = 5  # a tick every fifth of the lease: four ticks may fail in a row
MARGIN_PARTS = 5  # stop acting a fifth of the lease before it ends
GATEWAY = "gateway/"
PARTITION = "partition/"
CONTROLLER = "controller"
GROUPS = "groups/"
GROUP_SLOTS = 50  # Kafka's offsets.topic.num.partitions default; fixed: a group keeps its slot
PRODUCER_ID_BLOCKS = "counter/producer-id-blocks"
CLUSTER_SECRET = "secret/cluster-calls"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    node_id: int
    lease_ms: int = 10_000
    # How long a gateway whose registration ended (killed, or released by the workers'
    # parent) is still listed as a broker in Metadata; 0: only live ones. ``serve
    # --workers`` starts a dead worker again at the same address within moments, and a
    # client dropping a broker that Metadata stops naming can hang (librdkafka drops it,
    # and a transaction's send_offsets_to_transaction waiting on it as group coordinator
    # never returns: issues #5511, #5456). Apache Kafka likewise lists a killed broker
    # until its session times out (broker.session.timeout.ms, 9 s). Leaders, the
    # controller and group slots are only ever live gateways, whatever this says.
    listed_after_end_ms: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.node_id < 2**31:
            raise ValueError(f"--node-id must be 0..2147483647, not {self.node_id}")
        if self.lease_ms < 100:
            raise ValueError(f"--lease-ms must be at least 100, not {self.lease_ms}")

    @property
    def tick_s(self) -> float:
        return self.lease_ms / RENEWALS_PER_LEASE / 1000

    @property
    def margin_ms(self) -> int:
        return self.lease_ms // MARGIN_PARTS


@dataclass(frozen=True, slots=True)
class Node:
    """A live gateway as Metadata tells clients of it."""

    node_id: int
    host: str
    port: int
    http_url: str | None = None


@dataclass(frozen=True, slots=True)
class View:
    """What the last tick saw, replaced whole (the event loop reads it without locks)."""

    nodes: dict[int, Node] = field(default_factory=dict)  # live: they lead, coordinate
    leaders: dict[TopicId, int] = field(default_factory=dict)
    controller: int | None = None
    group_slots: dict[int, int] = field(default_factory=dict)  # slot -> coordinating node
    # The brokers Metadata names: the live ones, and those that ended a moment ago
    # (ClusterConfig.listed_after_end_ms).
    listed: dict[int, Node] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Round:
    """What one tick changed, for the caller to act on (gateway/services.py)."""

    was_controller: bool = False
    is_controller: bool = False
    slots_taken: tuple[int, ...] = ()  # group slots whose groups this gateway loads now
    slots_leaving: tuple[int, ...] = ()  # to hand over: flush, drop, release_group_slots
    slots_lost: tuple[int, ...] = ()  # taken over (the lease lapsed): drop their groups
    # Partitions taken or handed over: the others should look now (services.py tells
    # them), so a partition handed over is taken within moments, not at their next tick.
    moved: bool = False


def holder_name(node: Node) -> str:
    """A lease holder naming this process incarnation and where clients reach it."""
    http = node.http_url or "-"
    return f"{node.node_id} {node.host}:{node.port} {http} {os.getpid()}.{time.time_ns()}"


def node_of(holder: str) -> Node | None:
    try:
        node_id, address, http_url, _ = holder.split(" ")
        host, port = address.rsplit(":", 1)
        return Node(int(node_id), host, int(port), None if http_url == "-" else http_url)
    except ValueError:
        return None


_UTF16_UNIT = struct.Struct(">H")


@functools.lru_cache(maxsize=1 << 16)  # the same groups ask over and over
def group_slot(group_id: str) -> int:
    """The coordinator slot of a group: Kafka's ``Utils.abs(groupId.hashCode()) % 50``
    (Java's String.hashCode over UTF-16 code units), so a group's slot is the number of
    the ``__consumer_offsets`` partition Apache Kafka keeps it in."""
    h = 0
    for (unit,) in _UTF16_UNIT.iter_unpack(group_id.encode("utf-16-be", "surrogatepass")):
        h = (31 * h + unit) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % GROUP_SLOTS


def rendezvous(key: str, nodes: list[int]) -> int | None:
    """The node a key belongs to among ``nodes``: the highest hash of (key, node), so a
    node joining or leaving moves only the keys it wins or held."""
    if not nodes:
        return None
    return max(nodes, key=lambda n: hashlib.blake2b(f"{key}|{n}".encode(), digest_size=8).digest())


class Cluster:
    """This gateway's part in a cluster: its leases, and what it knows of the others.

    ``tick`` returns a ``Round``: what became or stopped being this gateway's (the
    controller, group slots), for the caller to load, flush or drop on the event loop."""

    def __init__(
        self,
        store: Store,
        config: ClusterConfig,
        namespace: str,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.namespace = namespace
        self._clock = clock_ms or store.now_ms
        self._leases: LeaseTable = store.lease_table(self._clock)
        self._held: dict[str, Lease] = {}  # tick thread only
        self._holder = ""
        self.me = Node(config.node_id, "", 0)
        self.view = View()
        # Group slots held -> until when their groups may be written (act_until): set by
        # the tick thread, read on the event loop and the I/O threads (one dict operation
        # at a time, atomic under the GIL); a slot leaving is served no more but written
        # until close_group_slots.
        self._slot_until: dict[int, int] = {}
        self._leaving: set[int] = set()
        self._renewed: dict[str, Lease | None] = {}  # this tick's renewals (_renew_held)
        self._tick_lock = threading.Lock()  # one tick at a time (the loop's, a test's)
        self.ticks = 0
        self.failed_ticks = 0  # rounds that failed (the store unreachable): counted by caller
        self.takeovers = 0  # partitions taken (from nobody or from a gateway gone)
        self.handovers = 0  # partitions handed to the gateway they belong to now
        self.stopped = False

    def announce(self, host: str, port: int, http_url: str | None) -> None:
        """Where clients reach this gateway (known once its listeners are bound)."""
        self.me = Node(self.config.node_id, host, port, http_url)
        self._holder = holder_name(self.me)

    # --- what handlers ask (event loop; no store calls) -------------------------------------
    def leader(self, topic: TopicId) -> Node | None:
        if self.store.leads(topic):
            return self.me
        view = self.view
        node_id = view.leaders.get(topic)
        if node_id is None or node_id == self.me.node_id:
            return None  # ours in the view only: handed over since it was read
        return view.nodes.get(node_id)

    def leader_now(self, topic: TopicId) -> Node | None:
        """The partition's leader as its lease says now (blocking: one store read), for
        a caller that cannot wait for the next tick's view: a topic made a moment ago."""
        lease = self._leases.current(PARTITION + str(topic))
        if lease is None or not lease.held_at(self._clock()):
            return None
        return node_of(lease.holder)

    def nodes(self) -> list[Node]:
        """The brokers Metadata names: this gateway, the live others, and those that
        ended a moment ago (``listed_after_end_ms``; they lead nothing meanwhile)."""
        view = self.view
        nodes = dict(view.listed)
        nodes[self.me.node_id] = self.me
        return sorted(nodes.values(), key=lambda n: n.node_id)

    @property
    def is_controller(self) -> bool:
        lease = self._held.get(CONTROLLER)
        return lease is not None and self._clock() < lease.act_until(self.config.margin_ms)

    def controller(self) -> Node | None:
        if self.is_controller:
            return self.me
        view = self.view
        return None if view.controller is None else view.nodes.get(view.controller)

    # --- group slots (event loop and I/O threads; no store calls) ----------------------------
    def serves_group_slot(self, slot: int) -> bool:
        """Does this gateway coordinate the slot's groups now: it holds the lease, is
        before its deadline and is not handing the slot over."""
        until = self._slot_until.get(slot)
        return until is not None and slot not in self._leaving and self._clock() < until

    def may_write_group_slot(self, slot: int) -> bool:
        """May the slot's rows be written now (the fence: module notes). Asked right
        before each batch of group state."""
        until = self._slot_until.get(slot)
        return until is not None and self._clock() < until

    def held_group_slots(self) -> set[int]:
        """Slots whose lease this gateway holds and is not handing over (whether or not
        before the deadline: a late renewal keeps them)."""
        return set(self._slot_until) - self._leaving

    def group_coordinator(self, group_id: str) -> Node | None:
        """The gateway coordinating the group, as far as this one knows; None while its
        slot has no live owner (or is being handed over by this one)."""
        slot = group_slot(group_id)
        if self.serves_group_slot(slot):
            return self.me
        node_id = self.view.group_slots.get(slot)
        if node_id is None or node_id == self.me.node_id:
            return None
        return self.view.nodes.get(node_id)

    def close_group_slots(self, slots: Iterable[int]) -> None:
        """No write of these slots' rows is let through from now on (a hand-over, after
        the first flush)."""
        for slot in slots:
            self._slot_until.pop(slot, None)

    def release_group_slots(self, slots: Iterable[int]) -> None:
        """Release the leases of slots handed over (blocking: an I/O thread), once their
        groups are flushed and dropped: the next owner takes them on its next tick."""
        with self._tick_lock:
            released = []
            for slot in slots:
                self._slot_until.pop(slot, None)
                self._leaving.discard(slot)
                lease = self._held.pop(GROUPS + str(slot), None)
                if lease is not None:
                    self._leases.release(lease)
                    released.append(slot)
            if released:
                log.info("handed group coordinator slots %s over", slot_ranges(released))

    def stats(self) -> dict[str, float]:
        """For the metrics: what this gateway leads and sees, now."""
        held = list(self._held)
        return {
            "partitions_led": sum(1 for n in held if n.startswith(PARTITION)),
            "group_slots_led": sum(1 for n in held if n.startswith(GROUPS)),
            "controller": float(self.is_controller),
            "gateways": len(self.view.nodes),
            "takeovers": self.takeovers,
            "failed_rounds": self.failed_ticks,
        }

    def may_write_as_controller(self) -> bool:
        """The fence of the controller's own rows (the Kafka transaction records): held,
        and before the lease's end less the margin. Asked on the store's writer."""
        return self.is_controller

    # --- producer ids, the cluster's secret -------------------------------------------------
    def producer_id_block(self) -> int:
        """A number no gateway of this store was given before (blocking)."""
        return self._leases.next_number(PRODUCER_ID_BLOCKS)

    def shared_secret(self) -> str:
        """The token the gateways of this store show each other on their cluster calls
        (gateway/cluster_calls.py), made by the first one to ask (blocking): whoever can
        read the store can read it, and nobody else."""
        return self._leases.shared_value(CLUSTER_SECRET, lambda: secrets.token_urlsafe(32))

    # --- the tick -------------------------------------------------------------------------------
    def tick(self) -> Round:
        """One round of renewing, looking and taking (blocking: an I/O thread). -> what
        changed, for the caller to act on (on the event loop)."""
        with self._tick_lock:
            if self.stopped:
                return Round()
            was = self.is_controller
            moves = self.takeovers + self.handovers
            taken, lost = self._tick()
            self.ticks += 1
            return Round(
                was,
                self.is_controller,
                tuple(taken),
                tuple(sorted(self._leaving)),
                tuple(lost),
                moved=self.takeovers + self.handovers != moves or bool(taken or self._leaving),
            )

    def _tick(self) -> tuple[list[int], list[int]]:
        cfg = self.config
        ttl = cfg.lease_ms
        me = cfg.node_id
        if not self._holder:
            raise RuntimeError("announce() the gateway's address before the first tick")
        self._renew_held()
        self._keep(GATEWAY + str(me), None)  # this gateway is alive
        now = self._clock()
        leases = {lease.name: lease for lease in self._leases.all()}
        nodes: dict[int, Node] = {}
        for name, lease in leases.items():
            if name.startswith(GATEWAY) and lease.held_at(now):
                node = node_of(lease.holder)
                if node is not None:
                    nodes[node.node_id] = node
        if GATEWAY + str(me) not in self._held:
            nodes.pop(me, None)  # another process holds our node id: take nothing
        live = sorted(nodes)
        # The controller: kept while held; when free, the lowest live node id takes it.
        if CONTROLLER in self._held:
            self._keep(CONTROLLER, None)
        elif live and live[0] == me and not _held(leases.get(CONTROLLER), now):
            self._take(CONTROLLER, None, ttl)
        # Partitions.
        topics = [
            md.topic
            for md in self.store.refresh_topics()
            if md.generation > 0 and md.topic.namespace == self.namespace
        ]
        for topic in topics:
            name = PARTITION + str(topic)
            owner = rendezvous(str(topic), live)
            if name in self._held:
                if owner is not None and owner != me:
                    self._hand_over(name, topic)
                else:
                    self._keep(name, topic)
            elif owner == me and not _held(leases.get(name), now):
                self._take(name, topic, ttl)
        known = set(topics)
        for name in [n for n in self._held if n.startswith(PARTITION)]:
            topic = _topic_of(name)
            if topic not in known:  # deleted
                self._hand_over(name, topic)
        taken, lost = self._group_slots(leases, live, now)
        # What the others hold (our own are answered from the store: Cluster.leader).
        holders = {leases[GATEWAY + str(n)].holder: n for n in nodes if GATEWAY + str(n) in leases}
        leaders = {}
        for name, lease in leases.items():
            if name.startswith(PARTITION) and lease.held_at(now) and lease.holder in holders:
                leaders[_topic_of(name)] = holders[lease.holder]
        ctl = leases.get(CONTROLLER)
        controller = holders.get(ctl.holder) if ctl is not None and ctl.held_at(now) else None
        slots = {}
        for slot in range(GROUP_SLOTS):
            lease = leases.get(GROUPS + str(slot))
            if lease is not None and lease.held_at(now) and lease.holder in holders:
                slots[slot] = holders[lease.holder]
        self.view = View(nodes, leaders, controller, slots, self._listed(leases, nodes, now))
        return taken, lost

    def _listed(self, leases: dict[str, Lease], live: dict[int, Node], now: int) -> dict[int, Node]:
        """The live nodes and those whose registration ended within listed_after_end_ms."""
        grace = self.config.listed_after_end_ms
        listed = dict(live)
        if grace <= 0:
            return listed
        for name, lease in leases.items():
            if not name.startswith(GATEWAY) or lease.held_at(now):
                continue
            node = node_of(lease.holder)
            ended_ago = now - lease.expires_ms
            if node is not None and node.node_id not in listed and ended_ago < grace:
                listed[node.node_id] = node
        return listed

    def _group_slots(
        self, leases: dict[str, Lease], live: list[int], now: int
    ) -> tuple[list[int], list[int]]:
        """Keep, take and mark for hand-over the group slots, as partitions are (by
        rendezvous over the live gateways). -> (slots taken, slots lost)."""
        me = self.config.node_id
        margin = self.config.margin_ms
        taken: list[int] = []
        lost: list[int] = []
        leaving: list[int] = []
        for slot in range(GROUP_SLOTS):
            if slot in self._leaving:
                continue  # neither renewed nor taken: release_group_slots ends it
            name = GROUPS + str(slot)
            owner = rendezvous(name, live)
            lease = self._held.get(name)
            if lease is not None:
                if owner is not None and owner != me:
                    self._leaving.add(slot)  # serve no more; the caller flushes, releases
                    leaving.append(slot)
                    continue
                renewed = self._renewal(lease)
                if renewed is None:
                    self._slot_until.pop(slot, None)
                    del self._held[name]
                    lost.append(slot)
                else:
                    self._held[name] = renewed
                    self._slot_until[slot] = renewed.act_until(margin)
            elif owner == me and not _held(leases.get(name), now):
                lease = self._leases.acquire(name, self._holder, self.config.lease_ms)
                if lease is not None:
                    self._held[name] = lease
                    self._slot_until[slot] = lease.act_until(margin)
                    taken.append(slot)
        if taken:  # our group rows from now on come after every earlier owner's
            self.store.sync_clock()
            log.info("took group coordinator slots %s (of %d)", slot_ranges(taken), GROUP_SLOTS)
        if leaving:
            log.info("handing group coordinator slots %s over", slot_ranges(leaving))
        if lost:
            log.warning("lost group coordinator slots %s: taken over", slot_ranges(lost))
        return taken, lost

    def _take(self, name: str, topic: TopicId | None, ttl: int) -> None:
        lease = self._leases.acquire(name, self._holder, ttl)
        if lease is None:
            return  # someone was quicker
        self._held[name] = lease
        if topic is None:  # the controller finishes topic changes: after the previous one
            self.store.sync_clock()
            # ...and runs the transaction manager, read from the rows the last one left
            self.store.lead_transactions(lease.act_until(self.config.margin_ms))
            log.info("took lease %s (epoch %d)", name, lease.epoch)
            return
        self.takeovers += 1
        stats = self.store.lead(topic, lease.act_until(self.config.margin_ms))
        log.info(
            "leading %s (lease epoch %d)%s",
            topic,
            lease.epoch,
            f"; settled a write left in part: {stats}" if any(stats.values()) else "",
        )

    def _renew_held(self) -> None:
        """Renew every lease held, in one conditional write (a lease a topic: one fsync
        each was ~900 a second for 2,000 topics over two --workers), for _keep and the
        group slots to take up. Not the slots being handed over: those only end."""
        names = [
            name
            for name in self._held
            if not (name.startswith(GROUPS) and int(name[len(GROUPS) :]) in self._leaving)
        ]
        renewed = self._leases.renew_many([self._held[name] for name in names])
        self._renewed = dict(zip(names, renewed, strict=True))
        for name, lease in self._renewed.items():
            if lease is not None:  # a lost one is _keep's and _group_slots' to let go
                self._held[name] = lease

    def _renewal(self, lease: Lease) -> Lease | None:
        """``lease`` renewed: by this tick's _renew_held, or now if it was not among them."""
        if lease.name in self._renewed:
            return self._renewed.pop(lease.name)
        return self._leases.renew(lease)

    def _keep(self, name: str, topic: TopicId | None) -> None:
        lease = self._held.get(name)
        renewed = None if lease is None else self._renewal(lease)
        if renewed is None and name.startswith(GATEWAY):
            renewed = self._leases.acquire(name, self._holder, self.config.lease_ms)
            if renewed is None:
                log.error("node id %s is in use by another live gateway", name[len(GATEWAY) :])
        if renewed is None:
            if lease is not None:
                log.warning("lost lease %s (epoch %d): taken over", name, lease.epoch)
            self._held.pop(name, None)
            if topic is not None:
                self.store.follow(topic)
            elif name == CONTROLLER:
                self.store.follow_transactions()
            return
        self._held[name] = renewed
        until = renewed.act_until(self.config.margin_ms)
        if topic is not None:
            self.store.lead(topic, until)
        elif name == CONTROLLER:
            self.store.lead_transactions(until)

    def _hand_over(self, name: str, topic: TopicId) -> None:
        self.store.follow(topic)  # first: no new write of ours is accepted
        self.store.flush()  # and none queued lands after the next leader has read
        lease = self._held.pop(name)
        self._leases.release(lease)
        self.handovers += 1
        log.info("handed %s over", topic)

    def stop(self, release: bool = True) -> None:
        """Stop taking part: hand every lease back (``release``), so the others take over
        at once instead of after the lease time; without, as a crash would leave them."""
        with self._tick_lock:
            self.stopped = True
            self._slot_until.clear()  # first: no group write of ours from now on
            self._leaving.clear()
            self.store.follow_transactions()
            for name, lease in list(self._held.items()):
                if name.startswith(PARTITION):
                    self.store.follow(_topic_of(name))
                if release:
                    try:
                        self._leases.release(lease)
                    except Exception as exc:  # the store may be failing: they expire anyway
                        log.warning("releasing lease %s failed: %s", name, exc)
            self._held.clear()


def _held(lease: Lease | None, now_ms: int) -> bool:
    return lease is not None and lease.held_at(now_ms)


def slot_ranges(slots: Iterable[int]) -> str:
    """``0-3 7 9-10``: slot numbers for a log line."""
    out: list[str] = []
    run: list[int] = []
    for n in sorted(slots):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [n]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return " ".join(out)


def _topic_of(lease_name: str) -> TopicId:
    namespace, _, topic = lease_name[len(PARTITION) :].partition(":")
    return TopicId(namespace, topic)
