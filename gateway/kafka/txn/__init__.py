"""Kafka transactions over TMS transactions (docs/transactions.md).

    broker.txns: TxnCoordinator        # one per Broker, built with it
    await broker.txns.ready()          # gateway start-up: finish decided commits first

The handlers (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit,
EndTxn, DescribeTransactions, ListTransactions, and Produce for transactional batches)
translate requests to the coordinator's methods; nothing here knows wire formats.
"""

from .coordinator import TxnConfig, TxnCoordinator, TxnError, for_version
from .model import PendingOffset, TxnRecord, TxnState

__all__ = [
    "PendingOffset",
    "TxnConfig",
    "TxnCoordinator",
    "TxnError",
    "TxnRecord",
    "TxnState",
    "for_version",
]
