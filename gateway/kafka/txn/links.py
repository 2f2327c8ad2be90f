"""What the Kafka transaction coordinator asks of, and answers to, the other gateways of a
cluster (``--cluster``; gateway/cluster_calls.py has the calls and why the controller
coordinates every transactional id).

- A partition's leader that is not the controller takes a transactional Produce's write
  pointer from the transactional id's record in the store (``write_pointer_from_store``).
- A group's coordinator that is not the controller sends TxnOffsetCommit's offsets to the
  controller, which keeps them in the transaction (``send_offsets``), and remembers them
  until the controller commits them there (``group.commit_txn``) or says the transaction
  ended (``group.txn_ended``): OffsetFetch's require_stable answers from that memory.
- The controller commits a group's offsets on the group's coordinator
  (``commit_offsets``) and tells the coordinators of an aborted transaction's groups.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tmsgate.protocol import ErrorCode
from tmsgate.storage import StorageError

from ...errors import error_kind
from .model import (
    TXN_AREA,
    PendingOffset,
    TopicPartition,
    TxnError,
    TxnRecord,
    decode_record,
    producing_write_pointer,
)

if TYPE_CHECKING:
    from ...cluster_calls import Body, ClusterCalls
    from ...commits import CommitPlan, GroupOffsets
    from .coordinator import TxnCoordinator

E = ErrorCode


class ClusterLinks:
    def __init__(self, coordinator: TxnCoordinator, calls: ClusterCalls) -> None:
        self.coordinator = coordinator
        self.calls = calls
        self.cluster = calls.cluster
        # Offsets this gateway sent to open transactions: group -> partition ->
        # (transactional id, until when, monotonic). A notice lost keeps them only until
        # the transaction's timeout.
        self._sent: dict[str, dict[TopicPartition, tuple[str, float]]] = {}
        calls.register("txn.offsets", self._on_offsets)
        calls.register("group.txn_ended", self._on_group_txn_ended)

    # --- on a partition's leader ---------------------------------------------------------------
    async def write_pointer_from_store(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, row: str
    ) -> int:
        """The coordinator's write_pointer_for, from the transactional id's record, which
        the controller wrote before it answered AddPartitionsToTxn (and which names every
        partition added). Read for every Produce: a record cached here could name a
        transaction that ended since, and the next one's records would be lost."""
        coordinator = self.coordinator
        raw = await coordinator.run(coordinator.store.get_state, TXN_AREA, row)
        if raw is None:
            raise TxnError(
                E.INVALID_PRODUCER_ID_MAPPING,
                f"transactional id {transactional_id!r} is unknown (InitProducerId first)",
            )
        rec = decode_record(transactional_id, raw)
        return producing_write_pointer(rec, transactional_id, producer_id, epoch, topic)

    # --- on a group's coordinator --------------------------------------------------------------
    async def send_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        group_id: str,
        offsets: dict[TopicPartition, PendingOffset],
    ) -> None:
        """TxnOffsetCommit's offsets into the transaction, on the controller."""
        body = {
            "tid": transactional_id,
            "pid": producer_id,
            "epoch": epoch,
            "group": group_id,
            "offsets": [
                [t, p, o.offset, o.leader_epoch, o.metadata] for (t, p), o in offsets.items()
            ],
        }
        try:
            doc = await self.calls.to_controller("txn.offsets", body)
        except (StorageError, OSError) as exc:  # NOT_COORDINATOR while the controller moves
            raise TxnError(error_kind(exc).kafka, str(exc)) from exc
        if doc.get("code"):
            raise TxnError(ErrorCode(int(doc["code"])), str(doc.get("message", "")))
        until = time.monotonic() + int(doc["timeoutMs"]) / 1000
        sent = self._sent.setdefault(group_id, {})
        for tp in offsets:
            sent[tp] = (transactional_id, until)

    def offsets_ended(self, group_id: str, transactional_id: str) -> None:
        """The controller committed or aborted the transaction whose offsets this gateway
        sent for ``group_id``: they are no longer unstable."""
        sent = self._sent.get(group_id)
        if sent is None:
            return
        for tp in [tp for tp, (tid, _) in sent.items() if tid == transactional_id]:
            del sent[tp]
        if not sent:
            del self._sent[group_id]

    def unstable(self, group_id: str) -> set[TopicPartition]:
        """The offsets this gateway sent to transactions still open, as far as it knows."""
        now = time.monotonic()
        return {tp for tp, (_, until) in self._sent.get(group_id, {}).items() if until > now}

    async def _on_group_txn_ended(self, body: Body) -> Body:
        self.offsets_ended(str(body["group"]), str(body["tid"]))
        return {}

    # --- on the controller -------------------------------------------------------------------
    async def _on_offsets(self, body: Body) -> Body:
        coordinator = self.coordinator
        offsets = {
            (str(t), int(p)): PendingOffset(int(o), int(le), str(md))
            for t, p, o, le, md in body["offsets"]
        }
        tid = str(body["tid"])
        try:
            await coordinator.ready()  # NOT_COORDINATOR once no longer the controller
            pending = coordinator.pending_offsets(
                tid, int(body["pid"]), int(body["epoch"]), str(body["group"])
            )
        except TxnError as exc:  # its code goes back, as TxnOffsetCommit answers it
            return {"code": int(exc.code), "message": str(exc)}
        pending.update(offsets)
        rec = coordinator.describe(tid)
        return {"code": 0, "timeoutMs": rec.timeout_ms if rec is not None else 60_000}

    def serves_group(self, group_id: str) -> bool:
        slots = self.coordinator.groups.slots
        return slots is not None and slots.serves(group_id)

    async def commit_offsets(
        self, plan: CommitPlan, group_id: str, offsets: GroupOffsets, replay: bool
    ) -> None:
        """A commit's step 5 for a group coordinated elsewhere."""
        body = {
            "tid": plan.transactional_id,
            "group": group_id,
            "offsets": [[t, p, *v] for (t, p), v in offsets.items()],
            "decidedMs": plan.decided_ms,
            "replay": replay,
        }
        await self.calls.to_group(group_id, "group.commit_txn", body)

    def tell_groups_ended(self, rec: TxnRecord) -> None:
        """An aborted transaction's groups coordinated elsewhere: their coordinators stop
        answering UNSTABLE_OFFSET_COMMIT for the offsets it had (a notice)."""
        me = self.cluster.me.node_id
        for group_id in sorted(rec.groups):
            node = self.cluster.group_coordinator(group_id)
            if node is not None and node.node_id != me:
                body = {"group": group_id, "tid": rec.transactional_id}
                self.calls.tell([node], "group.txn_ended", body)
