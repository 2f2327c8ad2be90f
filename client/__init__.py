"""Python SDK of the TMS HTTP API (the seed's programmatic API), sync and asyncio.

    from tmsgate.client import MessagingClient

    with MessagingClient("http://127.0.0.1:8080") as tms:
        tms.create_topic("orders")
        with tms.transaction() as tx:
            tx.publish("orders", b"order 17 shipped")    # visible at commit, atomically
        for message in tms.fetch("orders", read_committed=True):
            print(message.id.hex(), message.payload)

Kafka producer code joins the same transactions through tmsgate.client.kafka.
See docs/sdk.md.
"""

from ._async import AsyncMessagingClient, AsyncTransactionClient, AsyncTransactionContext
from ._errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NamespaceNotFound,
    NotFound,
    OutcomeUnknown,
    PayloadTooLarge,
    ServerError,
    ServiceUnavailable,
    TmsConnectionError,
    TmsError,
    TopicExists,
    TopicNotFound,
    TransactionConflict,
    TransactionInDoubt,
    Unauthorized,
    UnsupportedMediaType,
)
from ._scope import Participant, current_transaction
from ._sync import MessagingClient, TransactionClient, TransactionContext
from ._types import (
    Message,
    OpenTransaction,
    RollbackDetail,
    TopicInfo,
    Transaction,
    TransactionList,
    TxState,
    TxStatus,
)
from ._wire import Encoding

TX_HEADER = "tms.tx.write_pointer"
"""Kafka record header that publishes a record under a transaction (8-byte big-endian)."""

__all__ = [
    "TX_HEADER",
    "AsyncMessagingClient",
    "AsyncTransactionClient",
    "AsyncTransactionContext",
    "BadRequest",
    "Conflict",
    "Encoding",
    "Forbidden",
    "Message",
    "MessagingClient",
    "NamespaceNotFound",
    "NotFound",
    "OpenTransaction",
    "OutcomeUnknown",
    "Participant",
    "PayloadTooLarge",
    "RollbackDetail",
    "ServerError",
    "ServiceUnavailable",
    "TmsConnectionError",
    "TmsError",
    "TopicExists",
    "TopicInfo",
    "TopicNotFound",
    "Transaction",
    "TransactionClient",
    "TransactionConflict",
    "TransactionContext",
    "TransactionInDoubt",
    "TransactionList",
    "TxState",
    "TxStatus",
    "Unauthorized",
    "UnsupportedMediaType",
    "current_transaction",
]
